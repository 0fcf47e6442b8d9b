// The CPU emulation's runtime (cuda_emulation.h says what it is for and how a kernel runs).
//
// One OS thread runs everything. A launch runs its blocks one after the other; the threads
// of a block are fibers that the scheduler below resumes in thread order, each until it
// waits (barrier, warp operation) or returns. Memory checks come from the compiler: the
// emulated module is compiled with -fsanitize=thread (its instrumentation only), so
// every load and store of the module's code calls __tsan_{read,write}N below with its
// address, and the return address names the source line.
//
// Shadow state. Shared memory: per 4-byte word, the array it belongs to (or none: the gaps
// between arrays are out of bounds), and the last writer and reader with the barrier
// interval ("epoch") they accessed it in. Epochs come from one counter that only grows: a
// new block and every completed __syncthreads() take the next value, so "written in this
// epoch" and "written since this block started" are comparisons. Device memory: per word of a
// buffer that a kernel wrote, the launch, block, thread and epoch of the last write.
#include "common/emulation/cuda_emulation.h"

#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#ifndef ATTN_SOURCE_DIR
#define ATTN_SOURCE_DIR ""
#endif

namespace attn::emu {

__thread const Builtins* t_builtins = nullptr;

namespace {

// ---------------------------------------------------------------------------------------------
// Errors. The first error of a launch stops it; cudaGetLastError (or a synchronizing call)
// returns its code, and cudaGetErrorString the whole report (which thread, which line, why).

cudaError_t g_pending = cudaSuccess;  // not yet returned by cudaGetLastError
cudaError_t g_report_code = cudaSuccess;
std::string g_report;                 // cudaGetErrorString(g_report_code)

void record_error(cudaError_t code, const std::string& report) {
  if (g_pending != cudaSuccess) return;  // the first error counts, as on a GPU
  g_pending = code;
  g_report_code = code;
  g_report = report;
}

std::string strip_source_dir(std::string path) {
  const std::string root = ATTN_SOURCE_DIR;
  if (!root.empty() && path.compare(0, root.size(), root) == 0) {
    path.erase(0, root.size());
    if (!path.empty() && path[0] == '/') path.erase(0, 1);
  }
  return path;
}

std::string where_str(const Where& w) {
  return strip_source_dir(w.file ? w.file : "?") + ":" + std::to_string(w.line);
}

// "load_tile<64>" from "void attn::m02::x::SharedTiles::load_tile<64>(float (*) [64], ...)".
std::string short_function_name(const std::string& full) {
  int depth = 0;
  size_t end = full.size();
  for (size_t i = 0; i < full.size(); ++i) {
    const char c = full[i];
    if (c == '<') ++depth;
    if (c == '>') --depth;
    if (c == '(' && depth == 0 && i > 0) { end = i; break; }
  }
  std::string name = full.substr(0, end);
  depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (c == '<') ++depth;
    if (c == '>') --depth;
    if (depth == 0 && (c == ' ' || (c == ':' && i + 1 < name.size() && name[i + 1] == ':'))) {
      start = c == ' ' ? i + 1 : i + 2;
      if (c == ':') ++i;
    }
  }
  return name.substr(start);
}

// The source line of a code address: "modules/02_smem_tiling/exercise.cu:48 in row_max<64>
// (inlined into smem_tiling_kernel<...> at ...:112)", from the debug information via
// addr2line (binutils, installed with the compiler).
std::string source_of(const void* pc) {
  static std::map<const void*, std::string> cache;
  if (pc == nullptr) return "an unknown line";
  auto it = cache.find(pc);
  if (it != cache.end()) return it->second;
  Dl_info info{};
  std::string result;
  char address[32];
  std::snprintf(address, sizeof address, "%p", pc);
  if (dladdr(pc, &info) != 0 && info.dli_fbase != nullptr) {
    char cmd[512];
    const uintptr_t offset = uintptr_t(pc) - uintptr_t(info.dli_fbase) - 1;
    std::snprintf(cmd, sizeof cmd, "addr2line -C -f -i -e /proc/%d/exe 0x%lx 2>/dev/null",
                  int(getpid()), (unsigned long)offset);
    if (FILE* f = popen(cmd, "r")) {
      std::vector<std::string> lines;
      char buf[4096];
      while (std::fgets(buf, sizeof buf, f)) {
        std::string l = buf;
        while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
        lines.push_back(l);
      }
      pclose(f);
      // Pairs of lines, innermost first: function, then file:line [(discriminator n)].
      std::vector<std::pair<std::string, std::string>> frames;
      for (size_t i = 0; i + 1 < lines.size(); i += 2) {
        std::string loc = lines[i + 1];
        const size_t disc = loc.find(" (discriminator");
        if (disc != std::string::npos) loc.erase(disc);
        frames.emplace_back(short_function_name(lines[i]), strip_source_dir(loc));
      }
      if (!frames.empty() && frames[0].second.rfind("??", 0) != 0) {
        result = frames[0].second + " (in " + frames[0].first;
        for (size_t i = 1; i < frames.size() && i < 4; ++i)
          result += ", called from " + frames[i].first + " at " + frames[i].second;
        result += ")";
      }
    }
  }
  if (result.empty()) result = std::string("code address ") + address +
                               " (no line information: is addr2line installed?)";
  cache.emplace(pc, result);
  return result;
}

// ---------------------------------------------------------------------------------------------
// Fibers. On x86-64 a small hand-written switch (callee-saved registers and the FP control
// words; no system call); elsewhere glibc's ucontext.

constexpr size_t kStackBytes = 256 * 1024;

#if defined(__x86_64__) && defined(__linux__)
#define ATTN_EMU_ASM_FIBERS 1
extern "C" void attn_emu_switch(void** save_sp, void* new_sp);
extern "C" void attn_emu_fiber_start();
asm(R"(
  .text
  .globl attn_emu_switch
  .type attn_emu_switch, @function
attn_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size attn_emu_switch, .-attn_emu_switch
  .globl attn_emu_fiber_start
  .type attn_emu_fiber_start, @function
attn_emu_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size attn_emu_fiber_start, .-attn_emu_fiber_start
)");
#endif

struct Fiber {
  char* stack = nullptr;  // lowest usable byte; a PROT_NONE page lies below it
#ifdef ATTN_EMU_ASM_FIBERS
  void* sp = nullptr;
#else
  ucontext_t context;
#endif
};

#ifdef ATTN_EMU_ASM_FIBERS
void* g_scheduler_sp = nullptr;
#else
ucontext_t g_scheduler_context;
#endif

void allocate_stack(Fiber& f) {
  if (f.stack) return;
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  void* base = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    std::fprintf(stderr, "emulation: cannot map a fiber stack\n");
    std::abort();
  }
  mprotect(base, page, PROT_NONE);  // a stack overflow faults instead of corrupting memory
  f.stack = static_cast<char*>(base) + page;
}

// Prepares f to call entry(arg) when it is next switched to.
void prepare_fiber(Fiber& f, void (*entry)(void*), void* arg) {
  allocate_stack(f);
#ifdef ATTN_EMU_ASM_FIBERS
  uintptr_t top = (uintptr_t(f.stack) + kStackBytes) & ~uintptr_t(15);
  uint64_t* frame = reinterpret_cast<uint64_t*>(top - 64);
  uint32_t control[2] = {0, 0};
  asm volatile("stmxcsr %0" : "=m"(control[0]));
  asm volatile("fnstcw %0" : "=m"(control[1]));
  std::memcpy(&frame[0], control, 8);
  frame[1] = 0;                                   // r15
  frame[2] = 0;                                   // r14
  frame[3] = uint64_t(uintptr_t(entry));          // r13: the function
  frame[4] = uint64_t(uintptr_t(arg));            // r12: its argument
  frame[5] = 0;                                   // rbx
  frame[6] = 0;                                   // rbp
  frame[7] = uint64_t(uintptr_t(&attn_emu_fiber_start));
  f.sp = frame;
#else
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = f.stack;
  f.context.uc_stack.ss_size = kStackBytes;
  f.context.uc_link = nullptr;
  makecontext(&f.context, reinterpret_cast<void (*)()>(entry), 1, arg);  // one pointer argument
#endif
}

void switch_to_fiber(Fiber& f) {
#ifdef ATTN_EMU_ASM_FIBERS
  attn_emu_switch(&g_scheduler_sp, f.sp);
#else
  swapcontext(&g_scheduler_context, &f.context);
#endif
}

void switch_to_scheduler(Fiber& f) {
#ifdef ATTN_EMU_ASM_FIBERS
  attn_emu_switch(&f.sp, g_scheduler_sp);
#else
  swapcontext(&f.context, &g_scheduler_context);
#endif
}

// ---------------------------------------------------------------------------------------------
// Threads, blocks, launches.

enum class State { runnable, at_barrier, at_warp, exited };
enum class WarpOp { shuffle, vote, syncwarp };

struct Thread {
  Builtins builtins;
  int id = 0;  // linear index in the block
  State state = State::runnable;
  Where waiting_at{nullptr, 0};
  // The warp operation it waits in.
  WarpOp op = WarpOp::shuffle;
  int op_kind = 0, op_arg = 0, op_width = 32;
  unsigned op_mask = 0;
  uint64_t op_bits = 0, op_result = 0;
  const char* op_name = "";
  Fiber fiber;
};

struct SharedVariable {
  const void* site;
  SharedDeclaration declaration;
  size_t offset;  // in the arena
};

struct Launch {
  LaunchSpec spec;
  void (*body)(void*) = nullptr;
  void* context = nullptr;
  uint32_t serial = 0;
  bool aborted = false;
};

Launch* g_launch = nullptr;       // the running launch, or nullptr
uint32_t g_launch_serial = 0;
std::vector<Thread> g_threads;    // the threads of the running block
int g_block_threads = 0;
uint3 g_block_idx{0, 0, 0};
uint32_t g_block_linear = 0;
int g_exited = 0, g_at_barrier = 0;
uint64_t g_epoch_counter = 0;     // grows forever: epochs and warp stamps
uint64_t g_block_epoch = 0;       // the epoch the running block started in
uint64_t g_epoch = 0;             // the running block's current barrier interval
uint64_t g_warp_stamp[32];        // per warp: changes at every completed __syncwarp
__thread Thread* t_thread = nullptr;
std::map<const void*, int> g_max_dynamic_smem;  // cudaFuncSetAttribute

std::string thread_str(const Thread& t) {
  const uint3& i = t.builtins.thread_idx;
  char s[96];
  std::snprintf(s, sizeof s, "(%u,%u,%u)", i.x, i.y, i.z);
  return s;
}
std::string block_str() {
  char s[64];
  std::snprintf(s, sizeof s, "(%u,%u,%u)", g_block_idx.x, g_block_idx.y, g_block_idx.z);
  return s;
}
// "(x,y,z)" of a linear index into dims (thread in block, or block in grid).
std::string linear_str(uint32_t linear, const dim3& dims) {
  char s[96];
  std::snprintf(s, sizeof s, "(%u,%u,%u)", linear % dims.x, linear / dims.x % dims.y,
                linear / dims.x / dims.y);
  return s;
}
std::string who(const Thread& t) { return "thread " + thread_str(t) + " of block " + block_str(); }
std::string thread_list(const std::vector<int>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size() && i < 4; ++i)
    s += (i ? ", " : "") + thread_str(g_threads[size_t(ids[i])]);
  if (ids.size() > 4) s += " and " + std::to_string(ids.size() - 4) + " more";
  return s;
}

// Stops the launch with `report`: the running fiber never runs again.
[[noreturn]] void fail(cudaError_t code, const std::string& report) {
  record_error(code, "the emulator stopped the kernel (launched at " +
                         where_str(g_launch->spec.where) + "):\n    " + report);
  g_launch->aborted = true;
  Thread* t = t_thread;
  switch_to_scheduler(t->fiber);
  __builtin_unreachable();
}

// ---------------------------------------------------------------------------------------------
// Device memory: one reserved range of address space, buffers handed out with PROT_NONE gaps
// between them. An access in a gap is out of bounds of the buffer next to it.

constexpr size_t kGap = 64 * 1024;

struct GlobalWord {
  uint32_t launch = 0;  // 0: no kernel wrote it yet
  uint32_t block = 0;
  uint16_t thread = 0;
  uint64_t epoch = 0, warp_stamp = 0;
  const void* pc = nullptr;
};

struct Allocation {
  uintptr_t begin = 0;
  size_t bytes = 0, mapped = 0;
  std::vector<GlobalWord> shadow;  // made when a kernel first writes the buffer
};

uintptr_t g_heap_lo = 0, g_heap_span = 0, g_heap_next = 0;
std::map<uintptr_t, Allocation> g_allocations;
Allocation* g_last_allocation = nullptr;
size_t g_page = 4096;

void reserve_heap() {
  if (g_heap_lo) return;
  g_page = size_t(sysconf(_SC_PAGESIZE));
  for (size_t gib : {64, 16, 4, 1}) {
    const size_t bytes = gib << 30;
    void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
      g_heap_lo = g_heap_next = uintptr_t(p);
      g_heap_span = bytes;
      return;
    }
  }
  std::fprintf(stderr, "emulation: cannot reserve address space for device memory\n");
  std::abort();
}

Allocation* find_allocation(uintptr_t a) {
  if (g_last_allocation && a - g_last_allocation->begin < g_last_allocation->bytes)
    return g_last_allocation;
  auto it = g_allocations.upper_bound(a);
  if (it == g_allocations.begin()) return nullptr;
  --it;
  if (a - it->second.begin < it->second.bytes) return g_last_allocation = &it->second;
  return nullptr;
}

// "4 bytes past the end of a cudaMalloc'd buffer of 16384 bytes (4096 floats)".
std::string describe_outside(uintptr_t a, size_t n) {
  auto after = g_allocations.upper_bound(a);
  const Allocation* before = nullptr;
  if (after != g_allocations.begin()) before = &std::prev(after)->second;
  std::string s;
  auto buffer = [](const Allocation& al) {
    return "a cudaMalloc'd buffer of " + std::to_string(al.bytes) + " bytes (" +
           std::to_string(al.bytes / 4) + " floats)";
  };
  if (before && a >= before->begin + before->bytes && a < before->begin + before->mapped + kGap &&
      (after == g_allocations.end() || a - (before->begin + before->bytes) <= after->second.begin - a)) {
    const uintptr_t past = a - (before->begin + before->bytes);
    s = std::to_string(past) + " bytes past the end of " + buffer(*before) + ": float index " +
        std::to_string((a - before->begin) / 4) + " of " + std::to_string(before->bytes / 4);
  } else if (after != g_allocations.end() && a < after->second.begin) {
    s = std::to_string(after->second.begin - a) + " bytes before the start of " +
        buffer(after->second) + " (a negative index)";
  } else {
    s = "an address that is not in any live cudaMalloc'd buffer (freed, or far out of bounds)";
  }
  (void)n;
  return s;
}

// ---------------------------------------------------------------------------------------------
// Shared memory: one arena; each block lays its __shared__ arrays out anew, in the order its
// threads reach their declarations, with kSharedGap bytes of no-man's-land around each.

constexpr size_t kArenaBytes = 4 << 20;
constexpr size_t kSharedGap = 256;
constexpr size_t kStaticSharedLimit = 48 * 1024;
constexpr uint16_t kNobody = 0xffff, kMany = 0xfffe;

struct SharedWord {
  int32_t variable = -1;  // index into g_shared_vars; -1: between or after the arrays
  uint16_t writer = kNobody, reader = kNobody;
  uint64_t write_epoch = 0, read_epoch = 0;
  uint64_t write_warp_stamp = 0, read_warp_stamp = 0;
  const void* write_pc = nullptr;
  const void* read_pc = nullptr;
};

uintptr_t g_arena = 0;
std::vector<SharedWord> g_shared_shadow;
std::vector<SharedVariable> g_shared_vars;
size_t g_shared_end = kSharedGap;  // next free offset
size_t g_static_shared_bytes = 0;

void reserve_arena() {
  if (g_arena) return;
  void* p = mmap(nullptr, kArenaBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "emulation: cannot map shared memory\n");
    std::abort();
  }
  g_arena = uintptr_t(p);
  g_shared_shadow.resize(kArenaBytes / 4);
}

void reset_shared() {
  for (size_t w = 0; w < g_shared_end / 4 && w < g_shared_shadow.size(); ++w)
    g_shared_shadow[w].variable = -1;
  g_shared_vars.clear();
  g_shared_end = kSharedGap;
  g_static_shared_bytes = 0;
}

// "k_tile[3][17]" for a byte offset into variable v.
std::string element_name(const SharedVariable& v, size_t byte) {
  const SharedDeclaration& d = v.declaration;
  std::string s = d.name;
  size_t e = byte / d.element_bytes;
  if (d.rank == 0) return s;
  std::vector<size_t> idx(size_t(d.rank));
  for (int r = d.rank - 1; r >= 0; --r) {
    const size_t ext = d.extents && d.extents[r] ? d.extents[r] : (r == 0 ? SIZE_MAX : 1);
    idx[size_t(r)] = ext == SIZE_MAX ? e : e % ext;
    e = ext == SIZE_MAX ? 0 : e / ext;
  }
  for (size_t i : idx) s += "[" + std::to_string(i) + "]";
  return s;
}

std::string declaration_str(const SharedVariable& v) {
  const SharedDeclaration& d = v.declaration;
  std::string s = std::string("__shared__ ") + d.type + " " + d.name;
  if (d.extents)
    for (int r = 0; r < d.rank; ++r) s += "[" + std::to_string(d.extents[r]) + "]";
  else if (d.rank)
    s += "[] (" + std::to_string(v.declaration.bytes) + " bytes of dynamic shared memory)";
  return s + " at " + where_str(d.where);
}

std::string shared_outside(size_t offset) {
  const SharedVariable* below = nullptr;
  const SharedVariable* above = nullptr;
  for (const SharedVariable& v : g_shared_vars) {
    if (v.offset + v.declaration.bytes <= offset &&
        (!below || v.offset > below->offset))
      below = &v;
    if (v.offset > offset && (!above || v.offset < above->offset)) above = &v;
  }
  if (below && (!above || offset - (below->offset + below->declaration.bytes) <
                              above->offset - offset))
    return std::to_string(offset - (below->offset + below->declaration.bytes)) +
           " bytes past the end of " + declaration_str(*below) + " (index " +
           element_name(*below, offset - below->offset) + ")";
  if (above)
    return std::to_string(above->offset - offset) + " bytes before the start of " +
           declaration_str(*above) + " (a negative index)";
  return "shared memory outside every __shared__ array";
}

// ---------------------------------------------------------------------------------------------
// The checks on every load and store.

inline int warp_of(int id) { return id / 32; }

// True when a __syncwarp of their common warp orders an access by `other` (recorded with
// warp stamp `stamp`) before one by `me`.
inline bool warp_ordered(int other, uint64_t stamp, int me) {
  return warp_of(other) == warp_of(me) && g_warp_stamp[warp_of(me)] != stamp;
}

const char* access_verb(bool write) { return write ? "writes" : "reads"; }

// A source location on a line of its own, under the line that says what happened there.
std::string at(const void* pc) { return "\n      at " + source_of(pc) + "\n    "; }

// A GPU needs an access of 2, 4, 8 or 16 bytes to be aligned to its size.
inline bool naturally_aligned_size(size_t n) { return n == 2 || n == 4 || n == 8 || n == 16; }

void shared_access(uintptr_t a, size_t n, bool write, const void* pc) {
  Thread* t = t_thread;
  const size_t offset = a - g_arena;
  if (t == nullptr) return;  // the runtime's own fills
  if (naturally_aligned_size(n) && a % n != 0)
    fail(cudaErrorMisalignedAddress,
         who(*t) + " " + access_verb(write) + " " + std::to_string(n) + " bytes of shared memory at " +
             source_of(pc) + " from an address that is not " + std::to_string(n) +
             "-byte aligned (a GPU faults: misaligned address). Vector loads (float4) need "
             "16-byte aligned addresses.");
  const int me = t->id;
  for (size_t w = offset / 4; w <= (offset + n - 1) / 4; ++w) {
    SharedWord& s = g_shared_shadow[w];
    if (s.variable < 0)
      fail(cudaErrorIllegalAddress,
           who(*t) + " " + access_verb(write) + " shared memory out of bounds" + at(pc) +
               shared_outside(w * 4) + ".");
    // The element's name, for a report only (building it for every access would cost more
    // than the access and its check).
    auto element_of = [&] {
      const SharedVariable& var = g_shared_vars[size_t(s.variable)];
      return element_name(var, w * 4 - var.offset);
    };
#define element element_of()
    if (!write) {
      if (s.write_epoch < g_block_epoch)
        fail(cudaErrorLaunchFailure,
             who(*t) + " reads shared " + element + at(pc) +
                 "which no thread of this block has written (shared memory starts with "
                 "garbage). If another thread stores it, a __syncthreads() between that "
                 "store and this read is missing; else the load does not cover this element.");
      if (s.write_epoch == g_epoch && s.writer != me && !warp_ordered(s.writer, s.write_warp_stamp, me))
        fail(cudaErrorLaunchFailure,
             "shared-memory race: " + who(*t) + " reads " + element + at(pc) + "which thread " +
                 thread_str(g_threads[s.writer]) + " wrote since the last __syncthreads()" +
                 at(s.write_pc) +
                 "The read may see the old or the new value: a __syncthreads() between the "
                 "write and the read is missing.");
      if (s.read_epoch != g_epoch) {
        s.read_epoch = g_epoch;
        s.reader = uint16_t(me);
        s.read_pc = pc;
        s.read_warp_stamp = g_warp_stamp[warp_of(me)];
      } else if (s.reader != me) {
        s.reader = kMany;
      }
    } else {
      if (s.write_epoch == g_epoch && s.writer != me && !warp_ordered(s.writer, s.write_warp_stamp, me))
        fail(cudaErrorLaunchFailure,
             "shared-memory race: " + who(*t) + " writes " + element + at(pc) + "which thread " +
                 thread_str(g_threads[s.writer]) + " also wrote since the last __syncthreads()" +
                 at(s.write_pc) + "Which value remains is up to chance.");
      if (s.read_epoch == g_epoch &&
          (s.reader == kMany ||
           (s.reader != me && !warp_ordered(s.reader, s.read_warp_stamp, me))))
        fail(cudaErrorLaunchFailure,
             "shared-memory race: " + who(*t) + " writes " + element + at(pc) + "which " +
                 (s.reader == kMany
                      ? std::string("other threads read since the last __syncthreads(), the "
                                    "first of them")
                      : "thread " + thread_str(g_threads[s.reader]) +
                            " read since the last __syncthreads()") +
                 at(s.read_pc) +
                 "A reader may see the new value instead of the one it meant to read: a "
                 "__syncthreads() between the reads and this write is missing (e.g. before "
                 "the next tile overwrites the current one).");
      s.writer = uint16_t(me);
      s.write_epoch = g_epoch;
      s.write_warp_stamp = g_warp_stamp[warp_of(me)];
      s.write_pc = pc;
    }
#undef element
  }
}

void global_access(uintptr_t a, size_t n, bool write, const void* pc) {
  Thread* t = t_thread;
  Allocation* al = find_allocation(a);
  if (t == nullptr) {
    if (g_launch == nullptr) {
      std::fprintf(stderr,
                   "emulation: host code %s device memory at %s: on a GPU, memory from "
                   "cudaMalloc cannot be read or written by the CPU (copy it with cudaMemcpy)\n",
                   access_verb(write), source_of(pc).c_str());
      std::abort();
    }
    return;
  }
  if (al == nullptr || a + n > al->begin + al->bytes)
    fail(cudaErrorIllegalAddress,
         who(*t) + " " + access_verb(write) + " " + std::to_string(n) +
             " bytes of device memory out of bounds" + at(pc) +
             describe_outside(al ? al->begin + al->bytes : a, n) +
             ". On a GPU this is an illegal memory access or, worse, reads or overwrites "
             "another buffer silently.");
  if (naturally_aligned_size(n) && a % n != 0)
    fail(cudaErrorMisalignedAddress,
         who(*t) + " " + access_verb(write) + " " + std::to_string(n) + " bytes at " + source_of(pc) +
             " from an address that is not " + std::to_string(n) +
             "-byte aligned (byte offset " + std::to_string(a - al->begin) +
             " in its buffer): a GPU faults (misaligned address). float4 loads need rows "
             "that start on 16-byte boundaries.");
  if (!write && al->shadow.empty()) return;  // never written by a kernel: nothing can race
  if (al->shadow.empty()) al->shadow.resize((al->bytes + 3) / 4);
  const int me = t->id;
  const uint32_t launch = g_launch->serial;
  for (size_t w = (a - al->begin) / 4; w <= (a + n - 1 - al->begin) / 4; ++w) {
    GlobalWord& s = al->shadow[w];
    if (s.launch == launch) {
      const bool same_block = s.block == g_block_linear;
      const bool ordered = same_block && (s.thread == me || s.epoch != g_epoch ||
                                          warp_ordered(s.thread, s.warp_stamp, me));
      if (!ordered)
        fail(cudaErrorLaunchFailure,
             "global-memory race: " + who(*t) + " " + access_verb(write) + " float index " +
                 std::to_string(w) + " of a buffer" + at(pc) + "which thread " +
                 linear_str(s.thread, g_launch->spec.block) + " of " +
                 (same_block ? std::string("the same block") + " wrote since the last __syncthreads()"
                             : "block " + linear_str(s.block, g_launch->spec.grid) + " wrote in the same launch") +
                 at(s.pc) +
                 "Two threads write the same output element, or one reads what another "
                 "writes without a barrier between them.");
    }
    if (write) s = GlobalWord{launch, g_block_linear, uint16_t(me), g_epoch,
                              g_warp_stamp[warp_of(me)], pc};
  }
}

inline void check_access(uintptr_t a, size_t n, bool write, const void* pc) {
  if (a - g_arena < kArenaBytes) {
    shared_access(a, n, write, pc);
  } else if (a - g_heap_lo < g_heap_span) {
    global_access(a, n, write, pc);
  }
}

// ---------------------------------------------------------------------------------------------
// Running a launch.

void thread_main(void* arg);

void run_block(Launch& launch) {
  reset_shared();
  g_block_epoch = g_epoch = ++g_epoch_counter;
  for (uint64_t& s : g_warp_stamp) s = 0;
  g_exited = g_at_barrier = 0;
  const dim3 b = launch.spec.block;
  int id = 0;
  for (unsigned z = 0; z < b.z; ++z)
    for (unsigned y = 0; y < b.y; ++y)
      for (unsigned x = 0; x < b.x; ++x, ++id) {
        Thread& t = g_threads[size_t(id)];
        t.builtins = Builtins{uint3{x, y, z}, g_block_idx, b, launch.spec.grid};
        t.id = id;
        t.state = State::runnable;
        prepare_fiber(t.fiber, &thread_main, &t);
      }
  while (g_exited < g_block_threads) {
    bool ran = false;
    for (int i = 0; i < g_block_threads; ++i) {
      Thread& t = g_threads[size_t(i)];
      if (t.state != State::runnable) continue;
      ran = true;
      t_thread = &t;
      t_builtins = &t.builtins;
      switch_to_fiber(t.fiber);
      t_thread = nullptr;
      t_builtins = nullptr;
      if (launch.aborted) return;
    }
    if (!ran) {
      // Nobody can go on: threads wait for each other at different places.
      std::map<std::string, std::vector<int>> groups;
      for (int i = 0; i < g_block_threads; ++i) {
        const Thread& t = g_threads[size_t(i)];
        if (t.state == State::at_barrier)
          groups["__syncthreads() at " + where_str(t.waiting_at)].push_back(i);
        else if (t.state == State::at_warp)
          groups[std::string(t.op_name) + " at " + where_str(t.waiting_at)].push_back(i);
      }
      std::string report = "the threads of block " + block_str() +
                           " wait for each other forever (a GPU would hang):";
      for (const auto& [place, ids] : groups)
        report += "\n      " + thread_list(ids) + " wait in " + place;
      record_error(cudaErrorLaunchFailure, "the emulator stopped the kernel (launched at " +
                                               where_str(launch.spec.where) + "):\n    " + report);
      launch.aborted = true;
      return;
    }
  }
}

void thread_main(void* arg) {
  Thread* t = static_cast<Thread*>(arg);
  g_launch->body(g_launch->context);
  // The thread returned from the kernel.
  t->state = State::exited;
  ++g_exited;
  if (g_at_barrier > 0) {
    std::vector<int> waiting;
    Where at{nullptr, 0};
    for (int i = 0; i < g_block_threads; ++i)
      if (g_threads[size_t(i)].state == State::at_barrier) {
        waiting.push_back(i);
        at = g_threads[size_t(i)].waiting_at;
      }
    fail(cudaErrorLaunchFailure,
         "divergent __syncthreads(): " + who(*t) + " returned from the kernel while " +
             thread_list(waiting) + " wait at __syncthreads() at " + where_str(at) +
             ". Every thread of a block must reach every __syncthreads(): a thread without "
             "work must not return early, but take part in the loads and barriers.");
  }
  for (;;) switch_to_scheduler(t->fiber);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Called by the emulated code.

void run_launch(const LaunchSpec& spec, void (*body)(void*), void* context) {
  auto refuse = [&](cudaError_t code, const std::string& why) {
    record_error(code, "the launch at " + where_str(spec.where) + " was refused: " + why);
  };
  if (g_launch != nullptr) {
    refuse(cudaErrorLaunchFailure, "a kernel launched another kernel (not supported here)");
    return;
  }
  const dim3 g = spec.grid, b = spec.block;
  char dims[160];
  std::snprintf(dims, sizeof dims, "grid (%u,%u,%u), block (%u,%u,%u)", g.x, g.y, g.z, b.x, b.y,
                b.z);
  const uint64_t threads = uint64_t(b.x) * b.y * b.z;
  if (b.x == 0 || b.y == 0 || b.z == 0 || g.x == 0 || g.y == 0 || g.z == 0)
    return refuse(cudaErrorInvalidConfiguration,
                  std::string(dims) + ": a grid or block dimension is 0");
  if (b.x > 1024 || b.y > 1024 || b.z > 64 || threads > 1024)
    return refuse(cudaErrorInvalidConfiguration,
                  std::string(dims) + ": a block has at most 1024 threads (x, y <= 1024, z <= 64)");
  if (g.x > 2147483647u || g.y > kGridYZLimit || g.z > kGridYZLimit)
    return refuse(cudaErrorInvalidConfiguration,
                  std::string(dims) +
                      ": gridDim.x may reach 2^31 - 1, but gridDim.y and gridDim.z at most 65535 "
                      "on a GPU (255 under the emulation, which keeps the graders' grid-limit "
                      "cases small)");
  auto limit = g_max_dynamic_smem.find(spec.kernel);
  const size_t dyn_limit = limit != g_max_dynamic_smem.end() ? size_t(limit->second) : kStaticSharedLimit;
  if (spec.dynamic_smem > dyn_limit)
    return refuse(cudaErrorInvalidValue,
                  std::to_string(spec.dynamic_smem) + " bytes of dynamic shared memory; more "
                  "than 48 KiB needs cudaFuncSetAttribute(kernel, "
                  "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) first");
  reserve_arena();
  if (g_threads.size() < threads) g_threads.resize(size_t(threads));
  Launch launch;
  launch.spec = spec;
  launch.body = body;
  launch.context = context;
  launch.serial = ++g_launch_serial;
  g_launch = &launch;
  g_block_threads = int(threads);
  for (unsigned z = 0; z < g.z && !launch.aborted; ++z)
    for (unsigned y = 0; y < g.y && !launch.aborted; ++y)
      for (unsigned x = 0; x < g.x && !launch.aborted; ++x) {
        g_block_idx = uint3{x, y, z};
        g_block_linear = uint32_t((uint64_t(z) * g.y + y) * g.x + x);
        run_block(launch);
      }
  g_launch = nullptr;
}

void launch_not_performed(const Where& where) {
  record_error(cudaErrorLaunchFailure,
               "the launch at " + where_str(where) +
                   " was not performed: the emulation could not match the kernel's parameters "
                   "(is it a __global__ function taking its arguments by value?)");
}

void* shared_allocate(const void* site, const SharedDeclaration& d) {
  Thread* t = t_thread;
  for (const SharedVariable& v : g_shared_vars)
    if (v.site == site) return reinterpret_cast<void*>(g_arena + v.offset);
  const size_t align = std::max<size_t>(d.align, 16);
  const size_t offset = (g_shared_end + align - 1) / align * align;
  if (t && d.rank >= 0 && d.bytes > 0 &&
      g_static_shared_bytes + d.bytes > kStaticSharedLimit && d.extents != nullptr)
    fail(cudaErrorLaunchOutOfResources,
         "the block's __shared__ arrays take " + std::to_string(g_static_shared_bytes + d.bytes) +
             " bytes with " + d.name + " (" + where_str(d.where) +
             "); a block may have at most 48 KiB (49152 bytes) of static shared memory (nvcc "
             "refuses to compile this: \"uses too much shared data\")");
  if (offset + d.bytes + kSharedGap > kArenaBytes)
    fail(cudaErrorLaunchOutOfResources, "shared memory is full");
  SharedVariable v{site, d, offset};
  g_shared_vars.push_back(v);
  if (d.extents != nullptr) g_static_shared_bytes += d.bytes;
  const int index = int(g_shared_vars.size() - 1);
  // Garbage, as on a GPU: NaN bytes (not the harness's unwritten-output pattern 0xFF).
  std::memset(reinterpret_cast<void*>(g_arena + offset), 0x7f, d.bytes);
  for (size_t w = offset / 4; w < (offset + d.bytes + 3) / 4; ++w) {
    SharedWord& s = g_shared_shadow[w];
    s.variable = index;
    s.writer = s.reader = kNobody;
  }
  g_shared_end = offset + d.bytes + kSharedGap;
  return reinterpret_cast<void*>(g_arena + offset);
}

void* dynamic_shared_allocate(const void* site, const SharedDeclaration& declaration) {
  SharedDeclaration d = declaration;
  d.bytes = g_launch ? g_launch->spec.dynamic_smem : 0;
  if (d.bytes == 0) {
    // No dynamic shared memory was asked for: any access is out of bounds (an empty array
    // whose address still differs from every other array).
    d.bytes = 0;
  }
  return shared_allocate(site, d);
}

void syncthreads(Where where) {
  Thread* t = t_thread;
  if (g_exited > 0) {
    std::vector<int> gone;
    for (int i = 0; i < g_block_threads; ++i)
      if (g_threads[size_t(i)].state == State::exited) gone.push_back(i);
    fail(cudaErrorLaunchFailure,
         "divergent __syncthreads(): " + who(*t) + " reaches __syncthreads() at " +
             where_str(where) + ", but " + thread_list(gone) +
             " already returned from the kernel. Every thread of a block must reach every "
             "__syncthreads(): a thread without work must not return early, but take part in "
             "the loads and barriers.");
  }
  t->state = State::at_barrier;
  t->waiting_at = where;
  if (++g_at_barrier < g_block_threads) {
    switch_to_scheduler(t->fiber);
    return;
  }
  // The last thread arrived: all must wait at the same __syncthreads().
  for (int i = 0; i < g_block_threads; ++i) {
    const Thread& o = g_threads[size_t(i)];
    if (o.waiting_at.line != where.line || std::strcmp(o.waiting_at.file, where.file) != 0)
      fail(cudaErrorLaunchFailure,
           "divergent __syncthreads(): in block " + block_str() + ", thread " + thread_str(o) +
               " waits at __syncthreads() at " + where_str(o.waiting_at) + " while thread " +
               thread_str(*t) + " waits at the one at " + where_str(where) +
               ". A __syncthreads() inside a branch that not all threads of the block take "
               "(or in a loop they run different numbers of times) is undefined behaviour.");
  }
  for (int i = 0; i < g_block_threads; ++i) g_threads[size_t(i)].state = State::runnable;
  g_at_barrier = 0;
  g_epoch = ++g_epoch_counter;
}

int syncthreads_reduce(Where where, int kind, int predicate) {
  // The predicate travels through a shadow-free side channel: op_bits of each thread.
  Thread* t = t_thread;
  t->op_bits = predicate != 0;
  syncthreads(where);
  int count = 0;
  for (int i = 0; i < g_block_threads; ++i) count += int(g_threads[size_t(i)].op_bits);
  if (kind == 0) return count;
  if (kind == 1) return count == g_block_threads;
  return count > 0;
}

namespace {

// The lanes of t's warp that exist (a last warp may be partial).
unsigned existing_lanes(const Thread& t) {
  const int first = warp_of(t.id) * 32;
  const int n = std::min(32, g_block_threads - first);
  return n == 32 ? 0xffffffffu : ((1u << n) - 1);
}

// Waits until every lane of `mask` arrived at a warp operation, then computes every
// participant's result. Returns this thread's result.
uint64_t warp_rendezvous(Where where, WarpOp op, const char* name, unsigned mask, int kind,
                         uint64_t bits, int arg, int width) {
  Thread* t = t_thread;
  const int lane = t->id % 32, first = t->id - lane;
  if (!(mask & (1u << lane)))
    fail(cudaErrorLaunchFailure,
         who(*t) + " calls " + name + " at " + where_str(where) + " with mask 0x" +
             [&] { char s[16]; std::snprintf(s, sizeof s, "%08x", mask); return std::string(s); }() +
             ", which does not include its own lane " + std::to_string(lane));
  const unsigned lanes = mask & existing_lanes(*t);
  t->op = op;
  t->op_name = name;
  t->op_kind = kind;
  t->op_mask = mask;
  t->op_bits = bits;
  t->op_arg = arg;
  t->op_width = width;
  t->waiting_at = where;
  t->state = State::at_warp;
  bool all = true;
  for (int l = 0; l < 32; ++l) {
    if (!(lanes & (1u << l))) continue;
    Thread& o = g_threads[size_t(first + l)];
    if (o.state == State::exited)
      fail(cudaErrorLaunchFailure,
           who(*t) + " calls " + name + " at " + where_str(where) + " naming lane " +
               std::to_string(l) + " in its mask, but that thread (" + thread_str(o) +
               ") already returned from the kernel");
    if (o.state != State::at_warp) all = false;
  }
  if (!all) {
    switch_to_scheduler(t->fiber);
    return t->op_result;
  }
  // Everyone is here: same operation, same mask?
  for (int l = 0; l < 32; ++l) {
    if (!(lanes & (1u << l))) continue;
    const Thread& o = g_threads[size_t(first + l)];
    if (o.op != op || o.op_mask != mask || o.op_kind != kind)
      fail(cudaErrorLaunchFailure,
           "divergent warp operation in block " + block_str() + ": thread " + thread_str(o) +
               " is in " + o.op_name + " at " + where_str(o.waiting_at) + " while thread " +
               thread_str(*t) + " is in " + name + " at " + where_str(where) +
               " (the lanes named in a mask must all call the same operation with the same "
               "mask)");
  }
  unsigned ballot = 0;
  for (int l = 0; l < 32; ++l)
    if ((lanes & (1u << l)) && g_threads[size_t(first + l)].op_bits) ballot |= 1u << l;
  for (int l = 0; l < 32; ++l) {
    if (!(lanes & (1u << l))) continue;
    Thread& o = g_threads[size_t(first + l)];
    uint64_t r = 0;
    if (op == WarpOp::vote) {
      r = kind == 0 ? ballot : kind == 1 ? (ballot == lanes) : (ballot != 0);
    } else if (op == WarpOp::shuffle) {
      const int w = o.op_width;
      if (w <= 0 || w > 32 || (w & (w - 1)))
        fail(cudaErrorLaunchFailure, who(o) + ": the width of " + name + " at " +
                                         where_str(where) + " must be a power of 2 up to 32");
      const int base = l & ~(w - 1);
      int src = l;
      switch (o.op_kind) {
        case 0: src = base + (o.op_arg & (w - 1)); break;
        case 1: src = (l - base) - o.op_arg >= 0 ? l - o.op_arg : l; break;
        case 2: src = (l - base) + o.op_arg < w ? l + o.op_arg : l; break;
        default: src = (l ^ o.op_arg) < base + w ? (l ^ o.op_arg) : l; break;
      }
      if (src < 0 || src > 31 || !(lanes & (1u << src)))
        fail(cudaErrorLaunchFailure,
             who(o) + " reads lane " + std::to_string(src) + " in " + name + " at " +
                 where_str(where) + ", but that lane is not in the mask or does not exist "
                 "(the value would be undefined on a GPU)");
      r = g_threads[size_t(first + src)].op_bits;
    }
    o.op_result = r;
    o.state = State::runnable;
  }
  if (op == WarpOp::syncwarp) g_warp_stamp[warp_of(t->id)] = ++g_epoch_counter;
  return t->op_result;
}

}  // namespace

void syncwarp(Where where, unsigned mask) {
  warp_rendezvous(where, WarpOp::syncwarp, "__syncwarp", mask, 0, 0, 0, 32);
}

uint64_t shuffle(Where where, unsigned mask, int kind, uint64_t bits, int arg, int width) {
  static const char* names[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync",
                                "__shfl_xor_sync"};
  return warp_rendezvous(where, WarpOp::shuffle, names[kind & 3], mask, kind, bits, arg, width);
}

unsigned vote(Where where, unsigned mask, int kind, int predicate) {
  static const char* names[] = {"__ballot_sync", "__all_sync", "__any_sync"};
  return unsigned(warp_rendezvous(where, WarpOp::vote, names[kind % 3], mask, kind,
                                  predicate != 0, 0, 32));
}

unsigned active_mask() {
  const Thread* t = t_thread;
  const int first = t->id - t->id % 32;
  unsigned m = 0;
  for (int l = 0; l < 32 && first + l < g_block_threads; ++l)
    if (g_threads[size_t(first + l)].state != State::exited) m |= 1u << l;
  return m;
}

void trap(Where where) {
  fail(cudaErrorLaunchFailure, who(*t_thread) + " called __trap() at " + where_str(where));
}

void atomic_read(const void* address, void* value, size_t bytes) {
  const uintptr_t a = uintptr_t(address);
  const void* pc = __builtin_return_address(0);
  if (t_thread && (a - g_arena < kArenaBytes || a - g_heap_lo < g_heap_span)) {
    // Bounds and alignment only: atomics do not race with each other.
    if (a - g_arena < kArenaBytes) {
      const SharedWord& s = g_shared_shadow[(a - g_arena) / 4];
      if (s.variable < 0)
        fail(cudaErrorIllegalAddress, who(*t_thread) + " runs an atomic on shared memory out of "
                                      "bounds at " + source_of(pc) + ": " +
                                      shared_outside(a - g_arena));
    } else {
      Allocation* al = find_allocation(a);
      if (al == nullptr || a + bytes > al->begin + al->bytes)
        fail(cudaErrorIllegalAddress, who(*t_thread) + " runs an atomic on device memory out of "
                                      "bounds at " + source_of(pc) + ": " +
                                      describe_outside(a, bytes));
    }
  }
  std::memcpy(value, address, bytes);
}

void atomic_write(void* address, const void* value, size_t bytes) {
  std::memcpy(address, value, bytes);
}

cudaError_t set_function_attribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || value > 227 * 1024) return cudaErrorInvalidValue;
    g_max_dynamic_smem[func] = value;
  }
  return cudaSuccess;
}

}  // namespace attn::emu

// ---------------------------------------------------------------------------------------------
// The compiler's checks: -fsanitize=thread instruments every load and store that may touch
// memory other threads see with a call to these functions (the ThreadSanitizer runtime,
// which would define them, is not linked: the emulation has its own model of the threads).

using attn::emu::check_access;
#define ATTN_EMU_HOOK(size)                                                                \
  extern "C" void __tsan_read##size(void* a) {                                             \
    check_access(uintptr_t(a), size, false, __builtin_return_address(0));                  \
  }                                                                                        \
  extern "C" void __tsan_write##size(void* a) {                                            \
    check_access(uintptr_t(a), size, true, __builtin_return_address(0));                   \
  }                                                                                        \
  extern "C" void __tsan_unaligned_read##size(void* a) {                                   \
    check_access(uintptr_t(a), size, false, __builtin_return_address(0));                  \
  }                                                                                        \
  extern "C" void __tsan_unaligned_write##size(void* a) {                                  \
    check_access(uintptr_t(a), size, true, __builtin_return_address(0));                   \
  }                                                                                        \
  extern "C" void __tsan_volatile_read##size(void* a) {                                    \
    check_access(uintptr_t(a), size, false, __builtin_return_address(0));                  \
  }                                                                                        \
  extern "C" void __tsan_volatile_write##size(void* a) {                                   \
    check_access(uintptr_t(a), size, true, __builtin_return_address(0));                   \
  }
ATTN_EMU_HOOK(1)
ATTN_EMU_HOOK(2)
ATTN_EMU_HOOK(4)
ATTN_EMU_HOOK(8)
ATTN_EMU_HOOK(16)
#undef ATTN_EMU_HOOK
extern "C" void __tsan_read_range(void* a, size_t n) {
  check_access(uintptr_t(a), n, false, __builtin_return_address(0));
}
extern "C" void __tsan_write_range(void* a, size_t n) {
  check_access(uintptr_t(a), n, true, __builtin_return_address(0));
}
extern "C" void __tsan_init() {}
extern "C" void __tsan_func_entry(void*) {}
extern "C" void __tsan_func_exit() {}
extern "C" void __tsan_vptr_update(void**, void*) {}
extern "C" void __tsan_vptr_read(void**) {}

// ---------------------------------------------------------------------------------------------
// A crash inside a kernel (a wild pointer, a stack overflow): say which thread, then stop.

namespace {

void crash_handler(int sig, siginfo_t* info, void* uc) {
  using namespace attn::emu;
  const void* pc = nullptr;
#if defined(__x86_64__) && defined(__linux__)
  pc = reinterpret_cast<const void*>(static_cast<ucontext_t*>(uc)->uc_mcontext.gregs[REG_RIP] + 1);
#else
  (void)uc;
#endif
  if (t_thread != nullptr) {
    std::fprintf(stderr,
                 "\nemulation: the kernel crashed (%s at address %p): %s, at %s. On a GPU this "
                 "is an illegal memory access (an index far out of bounds, or a host pointer "
                 "used in a kernel).\n",
                 sig == SIGSEGV ? "segmentation fault" : "bus error", info->si_addr,
                 who(*t_thread).c_str(), source_of(pc).c_str());
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

struct InstallCrashHandler {
  InstallCrashHandler() {
    static char alt_stack[64 * 1024];
    stack_t ss{};
    ss.ss_sp = alt_stack;
    ss.ss_size = sizeof alt_stack;
    sigaltstack(&ss, nullptr);
    struct sigaction sa {};
    sa.sa_sigaction = crash_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
  }
} g_install_crash_handler;

}  // namespace

// ---------------------------------------------------------------------------------------------
// The runtime API.

namespace {
using attn::emu::Allocation;
using attn::emu::g_allocations;
using attn::emu::g_pending;

cudaError_t report(cudaError_t code, const std::string& why) {
  attn::emu::record_error(code, why);
  return code;
}

// The allocation holding [p, p + bytes), or nullptr.
Allocation* device_range(const void* p, size_t bytes) {
  Allocation* al = attn::emu::find_allocation(uintptr_t(p));
  if (al == nullptr || uintptr_t(p) + bytes > al->begin + al->bytes) return nullptr;
  return al;
}

bool is_device(const void* p) { return attn::emu::find_allocation(uintptr_t(p)) != nullptr; }

struct Event {
  std::chrono::steady_clock::time_point at;
};

double host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 8.0 * (1ull << 30);
}
}  // namespace

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  using namespace attn::emu;
  reserve_heap();
  if (ptr == nullptr) return report(cudaErrorInvalidValue, "cudaMalloc: null pointer");
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  if (g_allocations.empty()) g_heap_next = g_heap_lo;  // start over when everything was freed
  const size_t mapped = (bytes + g_page - 1) / g_page * g_page;
  const uintptr_t begin = g_heap_next + kGap;
  if (begin + mapped + kGap > g_heap_lo + g_heap_span || double(bytes) > host_memory_bytes())
    return report(cudaErrorMemoryAllocation, "cudaMalloc: out of (emulated) device memory");
  if (mprotect(reinterpret_cast<void*>(begin), mapped, PROT_READ | PROT_WRITE) != 0)
    return report(cudaErrorMemoryAllocation, "cudaMalloc: out of memory");
  g_heap_next = begin + mapped;
  Allocation al;
  al.begin = begin;
  al.bytes = bytes;
  al.mapped = mapped;
  g_allocations[begin] = std::move(al);
  g_last_allocation = nullptr;
  *ptr = reinterpret_cast<void*>(begin);
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  using namespace attn::emu;
  if (ptr == nullptr) return cudaSuccess;
  auto it = g_allocations.find(uintptr_t(ptr));
  if (it == g_allocations.end())
    return report(cudaErrorInvalidDevicePointer, "cudaFree: not a pointer from cudaMalloc");
  // Give the pages back, keep the address range reserved (so a late access still faults).
  mmap(ptr, it->second.mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
       -1, 0);
  g_allocations.erase(it);
  g_last_allocation = nullptr;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  if (kind == cudaMemcpyDefault)
    kind = is_device(dst) ? (is_device(src) ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                          : (is_device(src) ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if ((dst_dev && !device_range(dst, bytes)) || (src_dev && !device_range(src, bytes)))
    return report(cudaErrorInvalidValue,
                  "cudaMemcpy of " + std::to_string(bytes) +
                      " bytes: the device side is not (entirely) inside one cudaMalloc'd buffer");
  if ((!dst_dev && is_device(dst)) || (!src_dev && is_device(src)))
    return report(cudaErrorInvalidValue,
                  "cudaMemcpy: a device pointer where the copy direction says host memory");
  std::memmove(dst, src, bytes);
  return g_pending;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  if (!device_range(ptr, bytes))
    return report(cudaErrorInvalidValue,
                  "cudaMemset of " + std::to_string(bytes) +
                      " bytes: not (entirely) inside one cudaMalloc'd buffer");
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t) {
  return cudaMemset(ptr, value, bytes);
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  const double total = host_memory_bytes() / 2;
  if (total_bytes) *total_bytes = size_t(total);
  if (free_bytes) *free_bytes = size_t(total);
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = g_pending;
  g_pending = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return g_pending; }
cudaError_t cudaDeviceSynchronize() { return cudaGetLastError(); }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaGetLastError(); }
cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  *stream = reinterpret_cast<cudaStream_t>(new char);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete reinterpret_cast<char*>(stream);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = reinterpret_cast<cudaEvent_t>(new Event{});
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<Event*>(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  reinterpret_cast<Event*>(event)->at = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop) {
  *ms = std::chrono::duration<float, std::milli>(reinterpret_cast<Event*>(stop)->at -
                                                 reinterpret_cast<Event*>(start)->at)
            .count();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "CPU emulation (no GPU)");
  prop->totalGlobalMem = size_t(host_memory_bytes() / 2);
  prop->sharedMemPerBlock = 48 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = prop->maxGridSize[2] = int(attn::emu::kGridYZLimit);
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  prop->l2CacheSize = 0;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->sharedMemPerBlockOptin = 227 * 1024;
  prop->regsPerMultiprocessor = 65536;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = 48 * 1024; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrClockRate: *value = 1000000; break;
    case cudaDevAttrMultiProcessorCount: *value = 1; break;
    case cudaDevAttrMemoryClockRate: *value = 1000000; break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = 64; break;
    case cudaDevAttrL2CacheSize: *value = 0; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = 227 * 1024; break;
    default: *value = 0; break;
  }
  return cudaSuccess;
}

const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t err) {
  if (err != cudaSuccess && err == attn::emu::g_report_code && !attn::emu::g_report.empty())
    return attn::emu::g_report.c_str();
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    default: return "unknown error";
  }
}

long long clock64() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
