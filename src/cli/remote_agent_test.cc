// Multi-host launching: the remote agent taken from the launcher args, the host-to-rank map, the
// host check against real processes, and the failure scanner on Open MPI's and our own messages.
#include "cli/remote_agent.h"

#include <signal.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli/job_watch.h"

namespace zero::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(RemoteAgent, TakenFromLauncherArgsAndRemoved) {
  std::vector<std::string> args = {"--mca",         "btl",         "tcp,self", "--mca",
                                   "plm_rsh_agent", "ssh -p 2222", "-x",       "A"};
  auto agent = take_rsh_agent(args, {});
  ASSERT_TRUE(agent.ok()) << agent.status().message();
  EXPECT_THAT(*agent, ElementsAre("ssh", "-p", "2222"));
  EXPECT_THAT(args, ElementsAre("--mca", "btl", "tcp,self", "-x", "A"));

  std::vector<std::string> synonym = {"-mca", "orte_rsh_agent", "/x/agent.sh : rsh"};
  EXPECT_THAT(*take_rsh_agent(synonym, {}), ElementsAre("/x/agent.sh"));
  EXPECT_TRUE(synonym.empty());

  std::vector<std::string> none;
  EXPECT_THAT(*take_rsh_agent(none, {{"OMPI_MCA_plm_rsh_agent", "rsh"}}), ElementsAre("rsh"));
  EXPECT_THAT(*take_rsh_agent(none, {}), ElementsAre("ssh"));
  std::vector<std::string> dangling = {"--mca", "plm_rsh_agent"};
  EXPECT_THAT(take_rsh_agent(dangling, {}).status().message(), HasSubstr("without a value"));
}

TEST(RemoteAgent, HostRanksBothWays) {
  ResourcePool pool = {{"node1", {0, 1, 2}}, {"node2", {5}}, {"node3", {0, 1}}};
  const std::string map = encode_host_ranks(pool);
  EXPECT_EQ(map, "node1=0-2,node2=3,node3=4-5");
  EXPECT_EQ(ranks_of_host(map, "node2"), "3");
  EXPECT_EQ(ranks_of_host(map, "node3"), "4-5");
  EXPECT_EQ(ranks_of_host(map, "node"), "");
  EXPECT_EQ(host_of_rank(map, 0), "node1");
  EXPECT_EQ(host_of_rank(map, 2), "node1");
  EXPECT_EQ(host_of_rank(map, 3), "node2");
  EXPECT_EQ(host_of_rank(map, 5), "node3");
  EXPECT_EQ(host_of_rank(map, 6), "");
}

TEST(RemoteAgent, LocalHostNames) {
  LaunchEnvironment env;
  env.hostname = "box.lab.example";
  for (const char* host : {"localhost", "127.0.0.1", "box", "box.lab.example"}) {
    EXPECT_TRUE(is_local_host(host, env)) << host;
  }
  for (const char* host : {"box2", "box.other.example", "node1"}) {
    EXPECT_FALSE(is_local_host(host, env)) << host;
  }
}

TEST(RemoteAgent, SshGetsKeepAlivesOthersNothing) {
  EXPECT_THAT(agent_liveness_options({"/usr/bin/ssh", "-p", "22"}),
              ElementsAre("-o", "BatchMode=yes", "-o", "ServerAliveInterval=5", "-o",
                          "ServerAliveCountMax=3"));
  EXPECT_TRUE(agent_liveness_options({"rsh"}).empty());
}

// The check runs real processes: `sh -c SCRIPT HOST true` stands in for `ssh HOST true`.
TEST(RemoteAgent, CheckNamesEachHostThatDoesNotAnswer) {
  const std::vector<std::string> agent = {
      "sh", "-c",
      "case $0 in up*) exit 0;; slow) sleep 30;; *) echo \"no route to $0\" >&2; "
      "exit 255;; esac"};
  EXPECT_TRUE(check_hosts_reachable(agent, {"up1", "up2"}, "up1=0,up2=1", 5).ok());
  Status s = check_hosts_reachable(agent, {"up1", "down", "slow"}, "up1=0-1,down=2-3,slow=4", 1);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("2 of 3 hosts did not answer"));
  EXPECT_THAT(s.message(), HasSubstr("down (ranks 2-3): exit status 255: \"no route to down\""));
  EXPECT_THAT(s.message(), HasSubstr("slow (ranks 4): no answer within 1 s"));
  EXPECT_THAT(s.message(), Not(HasSubstr("up1 (")));
  EXPECT_THAT(check_hosts_reachable({"/no/such/agent"}, {"h"}, "h=0", 5).message(),
              HasSubstr("h (ranks 0): "));
}

// Lines as Open MPI 4.1 and our ranks print them (from the netns runs of tests/cli/netns_hosts.sh).
TEST(FailureScanner, LostHostNamedWithItsRanks) {
  FailureScanner scanner("node1=0-1,node2=2-3");
  EXPECT_FALSE(scanner.feed("zero train: placement: parameters host memory"));
  EXPECT_FALSE(scanner.failed());
  EXPECT_TRUE(
      scanner.feed("zero launch: lost host node2 (ranks 2-3) after 3.7 s: its session through "
                   "'/tmp/agent.sh' ended (killed by signal 9 (Killed)); Open MPI's messages ..."));
  EXPECT_FALSE(scanner.feed("ORTE has lost communication with a remote daemon."));
  EXPECT_THAT(scanner.lost_hosts(), ElementsAre("node2"));
  EXPECT_EQ(scanner.summary(), "host node2 (ranks 2-3) was lost");
}

TEST(FailureScanner, SilentRanksNamedWithTheirHosts) {
  FailureScanner scanner("node1=0,node2=1,node3=2");
  EXPECT_TRUE(scanner.feed(
      "[rank 0] error: collective all_reduce #14 (4 B, 1 x f32) did not complete within 5000 "
      "ms; rank(s) that did not reach it: 1, 2"));
  scanner.feed("MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD");
  EXPECT_THAT(scanner.silent_ranks(), ElementsAre(1, 2));
  EXPECT_EQ(scanner.summary(), "rank(s) 1 (on node2), 2 (on node3) did not answer");
}

TEST(FailureScanner, FirstRankErrorThenAbortThenRawLine) {
  FailureScanner first("a=0-1,b=2-3");
  first.feed("MPI_ABORT was invoked on rank 2 in communicator MPI_COMM_WORLD");
  first.feed("[rank 3] error: /ckpt/rank_3.safetensors: missing");
  EXPECT_EQ(first.summary(), "rank 3 (on b): /ckpt/rank_3.safetensors: missing");

  FailureScanner noticed("");
  EXPECT_TRUE(noticed.feed(
      "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed)."));
  EXPECT_EQ(noticed.summary(), "rank 1 failed first");

  FailureScanner daemons("");
  EXPECT_TRUE(daemons.feed("ORTE was unable to reliably start one or more daemons."));
  EXPECT_EQ(daemons.summary(), "ORTE was unable to reliably start one or more daemons.");

  FailureScanner quiet("");
  EXPECT_FALSE(quiet.feed("warning: something harmless"));
  EXPECT_FALSE(quiet.feed("[rank 1] warning: not an error"));
  EXPECT_FALSE(quiet.failed());
}

TEST(RunAndWatch, PassesStatusAndStopsAJobThatOutlivesItsFailure) {
  auto ok = run_and_watch({"sh", "-c", "echo fine >&2; exit 0"}, {});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 0);
  auto code = run_and_watch({"sh", "-c", "exit 3"}, {});
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 3);
  // A failure line, then the job hangs (as mpirun does when a host cannot be told to stop).
  auto hung = run_and_watch({"sh", "-c", "echo '[rank 0] error: boom' >&2; exec sleep 60"},
                            {.host_ranks = "h=0", .abort_grace_s = 1});
  ASSERT_TRUE(hung.ok());
  EXPECT_EQ(*hung, 128 + SIGTERM);
}

}  // namespace
}  // namespace zero::cli
