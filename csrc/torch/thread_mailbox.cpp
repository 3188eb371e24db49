// Checker flags posted to a thread by another thread.  A typecheck() region
// can be closed on another thread than the one that opened it (a generator
// suspended inside it and finalized elsewhere, a coroutine resumed on an
// executor): the closing thread must not touch its own flags, and cannot
// write the opener's thread-local ones.  It posts them to the opener's
// mailbox instead; the opener applies them at its next op (the fallback
// polls with one relaxed load), and a change the opener makes itself
// discards what was posted before it.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "shim_internal.h"

namespace cspmd {
namespace {

constexpr uint32_t kPosted = 1u << 31, kEnabled = 1u, kStrict = 2u, kLocal = 4u;

struct Mailbox {
    std::atomic<uint32_t> word{0};
    int64_t id = 0;
};

std::mutex g_lock;
std::unordered_map<int64_t, std::shared_ptr<Mailbox>> g_boxes;  // live threads'
int64_t g_next_id = 1;

// Unregisters the thread's mailbox when the thread ends; a post racing with
// that holds its own reference, so it writes into a box nobody reads.
struct Owner {
    std::shared_ptr<Mailbox> box;
    ~Owner() {
        if (box) {
            std::lock_guard<std::mutex> g(g_lock);
            g_boxes.erase(box->id);
        }
    }
};

thread_local Owner tl_owner;
thread_local std::atomic<uint32_t> *tl_word = nullptr;  // the poll's fast path

} // namespace

int64_t mailbox_open() {
    if (!tl_owner.box) {
        auto box = std::make_shared<Mailbox>();
        std::lock_guard<std::mutex> g(g_lock);
        box->id = g_next_id++;
        g_boxes.emplace(box->id, box);
        tl_owner.box = box;
        tl_word = &box->word;
    }
    return tl_owner.box->id;
}

bool mailbox_post(int64_t id, bool enabled, bool strict, bool local) {
    std::shared_ptr<Mailbox> box;
    {
        std::lock_guard<std::mutex> g(g_lock);
        auto it = g_boxes.find(id);
        if (it == g_boxes.end())
            return false;  // the thread has ended: nothing left to change
        box = it->second;
    }
    box->word.store(kPosted | (enabled ? kEnabled : 0u) | (strict ? kStrict : 0u) |
                        (local ? kLocal : 0u),
                    std::memory_order_release);
    return true;
}

void mailbox_discard() {
    if (tl_word)
        tl_word->store(0, std::memory_order_relaxed);
}

bool mailbox_poll() {
    if (!tl_word || !(tl_word->load(std::memory_order_relaxed) & kPosted))
        return false;
    uint32_t w = tl_word->exchange(0, std::memory_order_acquire);
    if (!(w & kPosted))
        return false;
    cspmd_checker_set((w & kEnabled) ? 1 : 0, (w & kStrict) ? 1 : 0);
    cspmd_checker_set_local((w & kLocal) ? 1 : 0);
    key_set_enabled((w & kEnabled) != 0);
    return true;
}

} // namespace cspmd
