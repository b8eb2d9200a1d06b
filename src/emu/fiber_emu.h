// User-level fibers for the emulator's fiber mode (cuda_emu.h, docs/emu.md): every CUDA thread of
// a block is a fiber on the one host thread that runs the launch, and a barrier is "arrive, then
// yield until the phase completes" instead of a futex sleep and an OS context switch.
//
// FiberPool::run(n, body) runs body(0) ... body(n - 1), each on its own stack, round robin in index
// order (deterministic): a fiber runs until it waits (fiber_yield_until) or returns; the scheduler
// skips a waiting fiber until the generation it waits on has moved.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#if !defined(__x86_64__) || defined(ZERO_EMU_FIBER_UCONTEXT)
#include <ucontext.h>
#define ZERO_EMU_FIBER_UCONTEXT 1
#endif

#if !defined(ZERO_EMU_FIBER_UCONTEXT)
// Saves the callee-saved registers, MXCSR and the x87 control word on the current stack, stores
// the stack pointer in *save_sp and resumes the context saved at next_sp (System V x86-64).
// Weak: every translation unit that includes this header defines it, the linker keeps one.
extern "C" void zero_emu_switch_context(void** save_sp, void* next_sp);
asm(R"(
  .text
  .weak zero_emu_switch_context
  .type zero_emu_switch_context, @function
zero_emu_switch_context:
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
  .size zero_emu_switch_context, .-zero_emu_switch_context
)");
#endif

namespace zero::emu {

// Stack of one fiber: kernels keep local arrays there (attention's rows), hence generous; the
// lowest page is a guard, so an overflow is a SIGSEGV rather than another fiber's frame.
inline constexpr size_t kFiberStackBytes = 256 * 1024;
inline constexpr size_t kFiberGuardBytes = 4096;

class FiberPool {
 public:
  // Runs body(0) ... body(n - 1) as fibers on the calling thread; returns when all have returned.
  // Aborts with `deadlock_message` when every unfinished fiber waits and none can go on (a barrier
  // not every live thread reaches: a GPU would hang or be undefined there).
  // REQUIRES: one run() at a time per pool (launch() holds its mutex); not called from a fiber.
  template <typename Body>
  void run(int n, Body& body, const char* deadlock_message) {
    while (static_cast<int>(fibers_.size()) < n) fibers_.push_back(std::make_unique<Fiber>());
    body_ = [](void* b, int index) { (*static_cast<Body*>(b))(index); };
    body_arg_ = &body;
    for (int i = 0; i < n; ++i) fibers_[i]->start(this, i);
    FiberPool* const outer = t_scheduler_;
    t_scheduler_ = this;
    int finished = 0;
    while (finished < n) {
      bool resumed = false;
      for (int i = 0; i < n; ++i) {
        Fiber& f = *fibers_[i];
        if (f.finished || (f.wait_generation != nullptr && *f.wait_generation == f.wait_value)) {
          continue;
        }
        f.wait_generation = nullptr;
        current_ = &f;
        switch_to(f);
        resumed = true;
        if (f.finished) ++finished;
      }
      if (!resumed && finished < n) {
        std::fprintf(stderr, "zero emu: kernel bug: %s\n", deadlock_message);
        std::fflush(stderr);
        std::abort();
      }
    }
    current_ = nullptr;
    t_scheduler_ = outer;
  }

  // Called from a fiber: returns once *generation != value (other fibers run meanwhile).
  static void yield_until_changed(const uint64_t* generation, uint64_t value) {
    FiberPool& pool = *t_scheduler_;
    Fiber& self = *pool.current_;
    self.wait_generation = generation;
    self.wait_value = value;
    pool.switch_to_scheduler(self);
  }

 private:
  struct Fiber {
    Fiber() {
      mapping = static_cast<char*>(
          mmap(nullptr, kFiberStackBytes + kFiberGuardBytes, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0));
      if (mapping == MAP_FAILED || mprotect(mapping, kFiberGuardBytes, PROT_NONE) != 0) {
        std::perror("zero emu: fiber stack");
        std::abort();
      }
    }
    ~Fiber() { munmap(mapping, kFiberStackBytes + kFiberGuardBytes); }
    Fiber(const Fiber&) = delete;
    Fiber& operator=(const Fiber&) = delete;

    // Prepares a fresh context whose first resumption enters fiber_main.
    void start(FiberPool* owner, int fiber_index) {
      pool = owner;
      index = fiber_index;
      finished = false;
      wait_generation = nullptr;
      char* const stack = mapping + kFiberGuardBytes;
#if defined(ZERO_EMU_FIBER_UCONTEXT)
      getcontext(&context);
      context.uc_stack.ss_sp = stack;
      context.uc_stack.ss_size = kFiberStackBytes;
      context.uc_link = nullptr;
      makecontext(&context, &FiberPool::fiber_main, 0);
#else
      // What zero_emu_switch_context pops, lowest address first: MXCSR and the x87 control word
      // (the caller's), r15 r14 r13 r12 rbx rbp (zero: rbp 0 ends backtraces), the return address
      // (fiber_main), and a null return address for fiber_main, which never returns. The top is
      // 16-byte aligned, so fiber_main starts with rsp = 8 mod 16, as after a call.
      auto* top = reinterpret_cast<uint64_t*>(stack + kFiberStackBytes);
      uint64_t* frame = top - 9;
      uint32_t mxcsr = 0;
      uint16_t fpu_control = 0;
      asm volatile("stmxcsr %0" : "=m"(mxcsr));
      asm volatile("fnstcw %0" : "=m"(fpu_control));
      frame[0] = mxcsr | (uint64_t{fpu_control} << 32);
      for (int r = 1; r <= 6; ++r) frame[r] = 0;
      frame[7] = reinterpret_cast<uint64_t>(&FiberPool::fiber_main);
      frame[8] = 0;
      sp = frame;
#endif
    }

    char* mapping = nullptr;
    FiberPool* pool = nullptr;
    int index = 0;
    bool finished = false;
    const uint64_t* wait_generation = nullptr;  // waiting while *wait_generation == wait_value
    uint64_t wait_value = 0;
#if defined(ZERO_EMU_FIBER_UCONTEXT)
    ucontext_t context;
#else
    void* sp = nullptr;  // saved stack pointer while switched out
#endif
  };

  [[noreturn]] static void fiber_main() {
    FiberPool& pool = *t_scheduler_;
    Fiber& self = *pool.current_;
    pool.body_(pool.body_arg_, self.index);
    self.finished = true;
    pool.switch_to_scheduler(self);
    std::abort();  // a finished fiber is never resumed
  }

  void switch_to(Fiber& f) {
#if defined(ZERO_EMU_FIBER_UCONTEXT)
    swapcontext(&scheduler_context_, &f.context);
#else
    zero_emu_switch_context(&scheduler_sp_, f.sp);
#endif
  }

  void switch_to_scheduler(Fiber& self) {
#if defined(ZERO_EMU_FIBER_UCONTEXT)
    swapcontext(&self.context, &scheduler_context_);
#else
    zero_emu_switch_context(&self.sp, scheduler_sp_);
#endif
  }

  std::vector<std::unique_ptr<Fiber>> fibers_;  // stacks reused by every launch
  void (*body_)(void*, int) = nullptr;
  void* body_arg_ = nullptr;
  Fiber* current_ = nullptr;
#if defined(ZERO_EMU_FIBER_UCONTEXT)
  ucontext_t scheduler_context_;
#else
  void* scheduler_sp_ = nullptr;
#endif
  // The pool whose fibers the calling host thread runs now (one launch per host thread at a time).
  static inline thread_local FiberPool* t_scheduler_ = nullptr;
};

}  // namespace zero::emu
