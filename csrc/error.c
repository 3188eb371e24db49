#include "cspmd.h"
