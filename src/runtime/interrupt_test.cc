// InterruptGuard: a real SIGINT / SIGTERM sets the flag (the process survives it), the first
// signal wins, the handlers are restored after, and the agreement prefers SIGTERM.
#include "runtime/interrupt.h"

#include <gtest/gtest.h>
#include <signal.h>

#include "comm/self_communicator.h"

namespace zero::runtime {
namespace {

TEST(Interrupt, RealSignalsSetTheFlagAndTheHandlersAreRestored) {
  for (int sig : {SIGINT, SIGTERM}) {
    {
      InterruptGuard guard;
      EXPECT_EQ(InterruptGuard::pending(), 0);
      ASSERT_EQ(::raise(sig), 0);  // would end the test process without the handler
      EXPECT_EQ(InterruptGuard::pending(), sig);
      SelfCommunicator comm;
      auto agreed = agree_on_interrupt(comm);
      ASSERT_TRUE(agreed.ok());
      EXPECT_EQ(*agreed, sig);
    }
    struct sigaction now {};
    sigaction(sig, nullptr, &now);
    EXPECT_EQ(now.sa_handler, SIG_DFL) << sig;
  }
  InterruptGuard guard;
  SelfCommunicator comm;
  EXPECT_EQ(*agree_on_interrupt(comm), 0);
  EXPECT_STREQ(interrupt_name(SIGTERM), "SIGTERM");
}

}  // namespace
}  // namespace zero::runtime
