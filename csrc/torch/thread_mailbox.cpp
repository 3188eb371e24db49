// Checker flags and the current mesh posted to a thread by another thread.
// A typecheck() or set_current_mesh() region can be closed on another
// thread than the one that opened it (a generator suspended inside it and
// finalized elsewhere, a coroutine resumed on an executor): the closing
// thread must not touch its own state, and cannot write the opener's
// thread-local one.  It posts it to the opener's mailbox instead; the
// opener applies it at its next op or collective (one relaxed load), and a
// change the opener makes itself discards what was posted before it.  One
// 64-bit word: the flags and their posted bit in the low half, the mesh
// id and its posted bit in the high half, each part posted and discarded
// on its own.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "shim_internal.h"

namespace cspmd {
namespace {

constexpr uint64_t kPosted = 1u << 31, kEnabled = 1u, kStrict = 2u, kLocal = 4u;
constexpr uint64_t kFlags = 0xffffffffu;            // the low half
constexpr uint64_t kMeshPosted = uint64_t{1} << 63; // the high half: posted bit, id
constexpr uint64_t kMesh = ~kFlags;

struct Mailbox {
    std::atomic<uint64_t> word{0};
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
thread_local std::atomic<uint64_t> *tl_word = nullptr;  // the poll's fast path

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

// Replace one part of the word (mask) with bits, leaving the other part.
static bool post(int64_t id, uint64_t mask, uint64_t bits) {
    std::shared_ptr<Mailbox> box;
    {
        std::lock_guard<std::mutex> g(g_lock);
        auto it = g_boxes.find(id);
        if (it == g_boxes.end())
            return false;  // the thread has ended: nothing left to change
        box = it->second;
    }
    uint64_t w = box->word.load(std::memory_order_relaxed);
    while (!box->word.compare_exchange_weak(w, (w & ~mask) | bits, std::memory_order_release,
                                            std::memory_order_relaxed)) {
    }
    return true;
}

bool mailbox_post(int64_t id, bool enabled, bool strict, bool local) {
    return post(id, kFlags,
                kPosted | (enabled ? kEnabled : 0u) | (strict ? kStrict : 0u) |
                    (local ? kLocal : 0u));
}

bool mailbox_post_mesh(int64_t id, uint32_t mesh) {
    return post(id, kMesh, kMeshPosted | (uint64_t{mesh & 0x7fffffffu} << 32));
}

void mailbox_discard() {
    if (tl_word)
        tl_word->fetch_and(~kFlags, std::memory_order_relaxed);
}

void mailbox_discard_mesh() {
    if (tl_word)
        tl_word->fetch_and(~kMesh, std::memory_order_relaxed);
}

bool mailbox_poll() {
    if (!tl_word || !(tl_word->load(std::memory_order_relaxed) & (kPosted | kMeshPosted)))
        return false;
    uint64_t w = tl_word->exchange(0, std::memory_order_acquire);
    if (w & kMeshPosted)
        (void)cspmd_mesh_apply(static_cast<uint32_t>((w >> 32) & 0x7fffffffu));
    if (!(w & kPosted))
        return false;
    cspmd_checker_set((w & kEnabled) ? 1 : 0, (w & kStrict) ? 1 : 0);
    cspmd_checker_set_local((w & kLocal) ? 1 : 0);
    key_set_enabled((w & kEnabled) != 0);
    return true;
}

} // namespace cspmd
