// `zero launch` logic: hostfile parsing, DeepSpeed's include/exclude examples, resource limits, and
// the exact mpirun / srun argv for machines described by hand.
#include "cli/launcher.h"

#include "cli/job_watch.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace zero::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string fixture_path(const std::string& name) {
  return std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/hostfiles/" + name;
}

TextFile read_fixture(const std::string& name) {
  std::ifstream in(fixture_path(name));
  std::ostringstream text;
  text << in.rdbuf();
  return {fixture_path(name), text.str()};
}

ResourcePool pool_of(const std::string& text) {
  auto pool = parse_hostfile(text, "test.hostfile");
  EXPECT_TRUE(pool.ok()) << pool.status().message();
  return pool.ok() ? *pool : ResourcePool{};
}

// Two 4-slot workers, as in DeepSpeed's runner.py docstring.
const char* kTwoWorkers = "worker-0 slots=4\nworker-1 slots=4\n";

TEST(Hostfile, ParsesCommentsBlankLinesAndTabs) {
  TextFile file = read_fixture("good.hostfile");
  auto pool = parse_hostfile(file.text, file.path);
  ASSERT_TRUE(pool.ok()) << pool.status().message();
  EXPECT_THAT(*pool,
              ElementsAre(HostSlots{"worker-0", {0, 1, 2, 3}}, HostSlots{"worker-1", {0, 1, 2, 3}},
                          HostSlots{"worker-2", {0, 1}}));
}

TEST(Hostfile, BadLineNamesFileAndLine) {
  TextFile file = read_fixture("bad_line.hostfile");
  auto pool = parse_hostfile(file.text, file.path);
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(
      pool.status().message(),
      HasSubstr("bad_line.hostfile:3: expected 'hostname slots=N', got 'worker-2 slots:4'"));
}

TEST(Hostfile, DuplicateHostNamesBothLines) {
  TextFile file = read_fixture("duplicate.hostfile");
  auto pool = parse_hostfile(file.text, file.path);
  ASSERT_FALSE(pool.ok());
  EXPECT_THAT(
      pool.status().message(),
      HasSubstr("duplicate.hostfile:4: duplicate host 'worker-1' (already listed at line 2)"));
}

TEST(Hostfile, RejectsMalformedCountsAndEmptyFiles) {
  for (const char* text : {"worker-0\n", "worker-0 slots=\n", "worker-0 slots=-1\n",
                           "worker-0 slots=2 extra\n", "worker-0 slots=x\n", "worker-0 4\n"}) {
    auto pool = parse_hostfile(text, "h");
    EXPECT_FALSE(pool.ok()) << text;
    if (!pool.ok()) {
      EXPECT_THAT(pool.status().message(), HasSubstr("h:1: ")) << text;
    }
  }
  EXPECT_THAT(parse_hostfile("a slots=0\n", "h").status().message(), HasSubstr("h:1: "));
  EXPECT_THAT(parse_hostfile("# nothing\n\n", "h").status().message(), HasSubstr("no hosts"));
}

TEST(Filter, DeepSpeedIncludeExample) {
  // runner.py: --include="worker-0@worker-1:0,2" keeps all of worker-0 and slots 0,2 of worker-1.
  auto pool = filter_resources(pool_of(kTwoWorkers), "worker-0@worker-1:0,2", "");
  ASSERT_TRUE(pool.ok()) << pool.status().message();
  EXPECT_THAT(*pool,
              ElementsAre(HostSlots{"worker-0", {0, 1, 2, 3}}, HostSlots{"worker-1", {0, 2}}));
}

TEST(Filter, DeepSpeedExcludeExample) {
  // runner.py: --exclude="worker-1:0" drops slot 0 of worker-1 only.
  auto pool = filter_resources(pool_of(kTwoWorkers), "", "worker-1:0");
  ASSERT_TRUE(pool.ok()) << pool.status().message();
  EXPECT_THAT(*pool,
              ElementsAre(HostSlots{"worker-0", {0, 1, 2, 3}}, HostSlots{"worker-1", {1, 2, 3}}));
}

TEST(Filter, KeepsHostfileOrderSortsAndDedupsSlots) {
  auto pool = filter_resources(pool_of(kTwoWorkers), "worker-1:3,1,1@worker-0:2", "");
  ASSERT_TRUE(pool.ok()) << pool.status().message();
  EXPECT_THAT(*pool, ElementsAre(HostSlots{"worker-0", {2}}, HostSlots{"worker-1", {1, 3}}));
}

TEST(Filter, ExcludingAWholeHostDropsIt) {
  auto pool = filter_resources(pool_of(kTwoWorkers), "", "worker-0");
  ASSERT_TRUE(pool.ok());
  EXPECT_THAT(*pool, ElementsAre(HostSlots{"worker-1", {0, 1, 2, 3}}));
  auto none = filter_resources(pool_of(kTwoWorkers), "", "worker-0@worker-1");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(Filter, ErrorsNameTheSpec) {
  ResourcePool pool = pool_of(kTwoWorkers);
  EXPECT_THAT(filter_resources(pool, "worker-9", "").status().message(),
              HasSubstr("--include 'worker-9': host 'worker-9' is not in the hostfile"));
  EXPECT_THAT(filter_resources(pool, "", "worker-1:4").status().message(),
              HasSubstr("--exclude 'worker-1:4': no slot 4 on host 'worker-1' (it has slots "
                        "0,1,2,3)"));
  EXPECT_THAT(filter_resources(pool, "worker-0:a", "").status().message(),
              HasSubstr("slot 'a' of host 'worker-0'"));
  EXPECT_THAT(filter_resources(pool, "worker-0", "worker-1").status().message(),
              HasSubstr("mutually exclusive"));
}

TEST(Limit, FirstNodesAndFirstSlots) {
  ResourcePool pool = pool_of("a slots=4\nb slots=4\nc slots=4\n");
  auto limited = limit_resources(pool, 2, 3);
  ASSERT_TRUE(limited.ok());
  EXPECT_THAT(*limited, ElementsAre(HostSlots{"a", {0, 1, 2}}, HostSlots{"b", {0, 1, 2}}));
  auto all = limit_resources(pool, -1, -1);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, pool);
  EXPECT_THAT(limit_resources(pool, 4, -1).status().message(),
              HasSubstr("--num_nodes 4: only 3 hosts available"));
  EXPECT_THAT(limit_resources(pool, -1, 5).status().message(),
              HasSubstr("--num_gpus 5: host 'a' has only 4 slots"));
}

TEST(DeepSpeedEnv, ParsesLinesAndNamesBadOnes) {
  std::map<std::string, std::string> vars;
  ASSERT_TRUE(
      parse_deepspeed_env({"~/.deepspeed_env", "# comment\nNCCL_IB_DISABLE=1\n\nA=x=y\n"}, vars)
          .ok());
  EXPECT_EQ(vars["NCCL_IB_DISABLE"], "1");
  EXPECT_EQ(vars["A"], "x=y");
  Status bad = parse_deepspeed_env({"./.deepspeed_env", "A=1\nnot a var\n"}, vars);
  EXPECT_THAT(bad.message(), HasSubstr("./.deepspeed_env:2: expected 'NAME=VALUE'"));
}

TEST(ShellWords, SplitsAndQuotesLikeAShell) {
  auto words = split_shell_words(R"(--mca btl 'tcp,self'  -x "A=b c" x\ y "q\"q")");
  ASSERT_TRUE(words.ok());
  EXPECT_THAT(*words, ElementsAre("--mca", "btl", "tcp,self", "-x", "A=b c", "x y", "q\"q"));
  EXPECT_FALSE(split_shell_words("'open").ok());
  EXPECT_FALSE(split_shell_words("\"open").ok());
  EXPECT_TRUE(split_shell_words("")->empty());
  EXPECT_EQ(shell_join({"mpirun", "-x", "A=b c", "it's", ""}), "mpirun -x 'A=b c' 'it'\\''s' ''");
}

// A 2-core CPU-only machine where we are not root.
LaunchEnvironment cpu_box() {
  LaunchEnvironment env;
  env.local_cores = 2;
  env.cwd = "/work";
  env.home = "/home/u";
  env.hostname = "box";
  env.self_exe = "/opt/zero/bin/zero";
  env.vars = {{"PATH", "/usr/bin"}, {"HOME", "/home/u"}, {"OMP_NUM_THREADS", "1"}};
  return env;
}

LaunchOptions train_options() {
  LaunchOptions options;
  options.command = {"zero", "train", "--deepspeed", "ds.json"};
  return options;
}

std::vector<std::string> plan_argv(const LaunchOptions& options, const LaunchEnvironment& env) {
  auto plan = build_launch_plan(options, env);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  return plan.ok() ? plan->argv : std::vector<std::string>{};
}

TEST(Plan, CpuBoxDefaultsToOneRank) {
  EXPECT_THAT(plan_argv(train_options(), cpu_box()),
              ElementsAre("mpirun", "-np", "1", "--bind-to", "none", "-x", "MASTER_ADDR=127.0.0.1",
                          "-x", "MASTER_PORT=29500", "-x", "OMP_NUM_THREADS", "-x", "PATH",
                          "/opt/zero/bin/zero", "train", "--deepspeed", "ds.json"));
}

TEST(Plan, CpuRanksWithinCoresNonRoot) {
  LaunchOptions options = train_options();
  options.num_gpus = 2;
  auto plan = build_launch_plan(options, cpu_box());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->world_size, 2);
  EXPECT_EQ(shell_join(plan->argv),
            "mpirun -np 2 --bind-to none -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 "
            "-x OMP_NUM_THREADS -x PATH /opt/zero/bin/zero train --deepspeed ds.json");
}

TEST(Plan, RootAndOversubscribed) {
  LaunchOptions options = train_options();
  options.num_gpus = 4;
  options.master_port = 12345;
  options.launcher_args = "--mca btl self,vader";
  LaunchEnvironment env = cpu_box();
  env.is_root = true;
  EXPECT_EQ(shell_join(plan_argv(options, env)),
            "mpirun -np 4 --bind-to none --oversubscribe --allow-run-as-root "
            "-x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=12345 -x OMP_NUM_THREADS -x PATH "
            "--mca btl self,vader /opt/zero/bin/zero train --deepspeed ds.json");
}

TEST(Plan, DeepSpeedEnvFilesExportToEveryRank) {
  LaunchEnvironment env = cpu_box();
  env.deepspeed_env_files = {{"/home/u/.deepspeed_env", "NCCL_DEBUG=INFO\nFOO=home\n"},
                             {"/work/.deepspeed_env", "FOO=cwd\nPATH=/custom/bin\n"}};
  env.vars["NCCL_DEBUG"] = "WARN";
  auto plan = build_launch_plan(train_options(), env);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(shell_join(plan->argv),
            "mpirun -np 1 --bind-to none -x FOO=cwd -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 "
            "-x NCCL_DEBUG=INFO -x PATH=/custom/bin -x OMP_NUM_THREADS "
            "/opt/zero/bin/zero train --deepspeed ds.json");
  env.deepspeed_env_files.push_back({"/work/.deepspeed_env", "oops\n"});
  EXPECT_THAT(build_launch_plan(train_options(), env).status().message(),
              HasSubstr("/work/.deepspeed_env:1:"));
}

TEST(Plan, GpuBoxUsesAllGpusAndIncludeSetsVisibleDevices) {
  LaunchEnvironment env = cpu_box();
  env.local_gpus = 4;
  auto all = build_launch_plan(train_options(), env);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->world_size, 4);
  EXPECT_FALSE(all->exports.contains("CUDA_VISIBLE_DEVICES"));
  // Four ranks on two cores with GPUs: still one process per GPU, so oversubscribe.
  EXPECT_THAT(shell_join(all->argv), HasSubstr("-np 4 --bind-to none --oversubscribe -x"));

  LaunchOptions options = train_options();
  options.include = "localhost:1,3";
  auto plan = build_launch_plan(options, env);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->world_size, 2);
  EXPECT_THAT(shell_join(plan->argv),
              HasSubstr("mpirun -np 2 --bind-to none -x CUDA_VISIBLE_DEVICES=1,3 -x"));

  options.num_gpus = 5;
  options.include.clear();
  EXPECT_THAT(build_launch_plan(options, env).status().message(),
              HasSubstr("--num_gpus 5: host 'localhost' has only 4 slots"));
}

TEST(Plan, HostfileMultiNode) {
  LaunchEnvironment env = cpu_box();
  env.hostfile = read_fixture("good.hostfile");
  LaunchOptions options = train_options();
  options.num_nodes = 2;
  options.num_gpus = 2;
  auto plan = build_launch_plan(options, env);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->world_size, 4);
  EXPECT_EQ(plan->master_addr, "worker-0");
  EXPECT_EQ(shell_join(plan->argv),
            "mpirun -np 4 --host worker-0:2,worker-1:2 --bind-to none -x MASTER_ADDR=worker-0 "
            "-x MASTER_PORT=29500 -x OMP_NUM_THREADS -x PATH "
            "--mca plm_rsh_agent '/opt/zero/bin/zero _launch_agent' "
            "/opt/zero/bin/zero train --deepspeed ds.json");
  EXPECT_EQ(plan->host_ranks, "worker-0=0-1,worker-1=2-3");
  EXPECT_THAT(plan->remote_hosts, ElementsAre("worker-0", "worker-1"));
  EXPECT_THAT(plan->remote_agent, ElementsAre("ssh"));

  LaunchOptions same = train_options();
  same.include = "worker-0:1,2@worker-1:1,2";
  same.master_addr = "10.0.0.1";
  auto shared = build_launch_plan(same, env);
  ASSERT_TRUE(shared.ok()) << shared.status().message();
  EXPECT_EQ(shared->exports.at("CUDA_VISIBLE_DEVICES"), "1,2");
  EXPECT_EQ(shared->exports.at("MASTER_ADDR"), "10.0.0.1");

  LaunchOptions differ = train_options();
  differ.include = "worker-0:0,2@worker-1:1";
  EXPECT_EQ(build_launch_plan(differ, env).status().code(), StatusCode::kUnimplemented);
}

TEST(Plan, SingleHostHostfileUsesLoopback) {
  LaunchEnvironment env = cpu_box();
  env.hostfile = read_fixture("localhost2.hostfile");
  EXPECT_THAT(shell_join(plan_argv(train_options(), env)),
              HasSubstr("mpirun -np 2 --host localhost:2 --bind-to none -x MASTER_ADDR=127.0.0.1"));
}

TEST(Plan, SlurmWithHostfile) {
  LaunchEnvironment env = cpu_box();
  env.hostfile = read_fixture("good.hostfile");
  LaunchOptions options = train_options();
  options.launcher = LauncherKind::kSlurm;
  options.exclude = "worker-2";
  options.launcher_args = "--partition gpu";
  EXPECT_THAT(
      plan_argv(options, env),
      ElementsAre("srun", "-n", "8", "--nodes", "2", "--nodelist=worker-0,worker-1",
                  "--ntasks-per-node", "4", "--export=ALL,MASTER_ADDR=worker-0,MASTER_PORT=29500",
                  "--partition", "gpu", "/opt/zero/bin/zero", "train", "--deepspeed", "ds.json"));
}

TEST(Plan, SlurmWithoutHostfile) {
  LaunchOptions options = train_options();
  options.launcher = LauncherKind::kSlurm;
  options.num_nodes = 2;
  options.num_gpus = 8;
  EXPECT_THAT(plan_argv(options, cpu_box()),
              ElementsAre("srun", "-n", "16", "--nodes", "2", "--ntasks-per-node", "8",
                          "--export=ALL,MASTER_PORT=29500", "/opt/zero/bin/zero", "train",
                          "--deepspeed", "ds.json"));
  LaunchOptions named = train_options();
  named.launcher = LauncherKind::kSlurm;
  named.include = "n1@n2";
  EXPECT_THAT(plan_argv(named, cpu_box()),
              ElementsAre("srun", "-n", "2", "--nodes", "2", "--ntasks-per-node", "1",
                          "--nodelist=n1,n2", "--export=ALL,MASTER_PORT=29500",
                          "/opt/zero/bin/zero", "train", "--deepspeed", "ds.json"));
  named.include = "n1:0";
  EXPECT_THAT(build_launch_plan(named, cpu_box()).status().message(),
              HasSubstr("slot lists need a hostfile"));
}

TEST(Plan, RejectsBadCombinations) {
  LaunchEnvironment env = cpu_box();
  LaunchOptions options = train_options();
  options.num_gpus = 1;
  options.include = "localhost";
  EXPECT_THAT(build_launch_plan(options, env).status().message(),
              HasSubstr("cannot combine --num_nodes/--num_gpus with --include/--exclude"));

  LaunchOptions empty = train_options();
  empty.command.clear();
  EXPECT_THAT(build_launch_plan(empty, env).status().message(), HasSubstr("after '--'"));

  LaunchOptions missing = train_options();
  missing.hostfile_path = "/nope/hostfile";
  missing.hostfile_given = true;
  EXPECT_EQ(build_launch_plan(missing, env).status().code(), StatusCode::kNotFound);

  LaunchOptions nodes = train_options();
  nodes.num_nodes = 2;
  EXPECT_THAT(build_launch_plan(nodes, env).status().message(), HasSubstr("only this machine"));

  LaunchOptions bad_args = train_options();
  bad_args.launcher_args = "'unterminated";
  EXPECT_THAT(build_launch_plan(bad_args, env).status().message(), HasSubstr("unterminated"));
}

TEST(Plan, OtherCommandsRunAsGiven) {
  LaunchOptions options = train_options();
  options.command = {"python3", "-c", "print(1)"};
  auto argv = plan_argv(options, cpu_box());
  ASSERT_GE(argv.size(), 3u);
  EXPECT_THAT(std::vector<std::string>(argv.end() - 3, argv.end()),
              ElementsAre("python3", "-c", "print(1)"));
}

// --enable_each_rank_log DIR: each rank's stdout and stderr go to DIR/<timestamp>_rank<N>.log, N
// from the launcher's rank variable (DeepSpeed's launch.py names the files so).
TEST(Plan, EachRankLogWrapsTheCommand) {
  LaunchOptions options = train_options();
  options.num_gpus = 2;
  options.each_rank_log_dir = "logs";  // relative to the launcher's cwd
  LaunchEnvironment env = cpu_box();
  env.start_timestamp = "20261125130501";
  auto plan = build_launch_plan(options, env);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->rank_log_pattern, "/work/logs/20261125130501_rank<N>.log");
  EXPECT_EQ(
      shell_join(plan->argv),
      "mpirun -np 2 --bind-to none -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 "
      "-x OMP_NUM_THREADS -x PATH sh -c 'mkdir -p /work/logs && exec \"$@\" "
      ">/work/logs/20261125130501_rank\"${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${SLURM_PROCID:-0}}"
      "}\".log 2>&1' zero-rank-log /opt/zero/bin/zero train --deepspeed ds.json");
  // DeepSpeed's default "None" (and an empty value) mean off.
  for (const char* off : {"None", ""}) {
    options.each_rank_log_dir = off;
    auto plain = build_launch_plan(options, env);
    ASSERT_TRUE(plain.ok());
    EXPECT_TRUE(plain->rank_log_pattern.empty());
    EXPECT_EQ(plain->argv[plain->argv.size() - 4], "/opt/zero/bin/zero");
  }
}

TEST(Environment, GathersThisMachine) {
  auto env = gather_launch_environment(fixture_path("good.hostfile"));
  ASSERT_TRUE(env.ok());
  EXPECT_GE(env->local_cores, 1);
  EXPECT_FALSE(env->self_exe.empty());
  ASSERT_TRUE(env->hostfile.has_value());
  EXPECT_THAT(env->hostfile->text, HasSubstr("worker-0 slots=4"));
  auto none = gather_launch_environment("/nonexistent/hostfile");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->hostfile.has_value());
}

// A FIFO given as the hostfile is refused at once (before: the launcher blocked in open()).
TEST(Environment, HostfileMustBeARegularFile) {
  const std::string dir = ::testing::TempDir() + "zero_launcher_fifo_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string fifo = dir + "/hostfile";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto env = gather_launch_environment(fifo);
  std::filesystem::remove_all(dir);
  ASSERT_FALSE(env.ok());
  EXPECT_THAT(
      env.status().message(),
      HasSubstr("hostfile: is a FIFO (named pipe), not a regular file (expected a hostfile)"));
}

TEST(Run, ReturnsTheChildExitStatus) {
  EXPECT_EQ(*run_and_watch({"sh", "-c", "exit 3"}, {}), 3);
  EXPECT_EQ(*run_and_watch({"true"}, {}), 0);
  EXPECT_EQ(*run_and_watch({"sh", "-c", "kill -TERM $$"}, {}), 128 + 15);
  EXPECT_FALSE(run_and_watch({"/nonexistent/binary-xyz"}, {}).ok());
}

}  // namespace
}  // namespace zero::cli
