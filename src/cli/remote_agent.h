// Several hosts through Open MPI's remote agent (ssh unless the user names another): the agent
// mpirun would run, a check that every host answers it before any rank starts, and
// `zero _launch_agent`, the thin wrapper mpirun runs in the agent's place so that a host whose
// session ends mid-run is named with its ranks (Open MPI says only "unable to reliably start one
// or more daemons", naming nothing).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "cli/launcher.h"
#include "core/status.h"

namespace zero::cli {

// Open MPI's MCA names for the agent (plm_rsh_agent and its synonyms).
bool is_rsh_agent_param(std::string_view name);

// The agent mpirun would use: `--mca plm_rsh_agent X` (or -mca / orte_rsh_agent / pls_rsh_agent)
// in `launcher_args` (removed from them, because the wrapper takes its place), else
// $OMPI_MCA_plm_rsh_agent, else "ssh". Open MPI's "a : b" list (try a, then b) keeps its first
// entry. The result is split into words ("ssh -p 2222" is two words plus the host).
StatusOr<std::vector<std::string>> take_rsh_agent(std::vector<std::string>& launcher_args,
                                                  const std::map<std::string, std::string>& vars);

// Whether `host` is the launching machine itself (mpirun starts no agent for it).
bool is_local_host(const std::string& host, const LaunchEnvironment& env);

// "node1=0-3,node2=4-7": which ranks each host runs (mpirun numbers them host by host), and back.
std::string encode_host_ranks(const ResourcePool& pool);
std::string ranks_of_host(std::string_view encoded, std::string_view host);
std::string host_of_rank(std::string_view encoded, int rank);

// The extra words for ssh so that a host that stops answering ends its session in about 15 s
// (ServerAlive probes) instead of at TCP's timeout, and a password prompt never waits (BatchMode).
// Empty for any other agent.
std::vector<std::string> agent_liveness_options(const std::vector<std::string>& agent);

// Runs `AGENT HOST true` on every host at once and waits at most `timeout_s`. OK when all answer;
// otherwise an error naming each host that did not, its ranks and the agent's last words.
Status check_hosts_reachable(const std::vector<std::string>& agent,
                             const std::vector<std::string>& hosts, std::string_view host_ranks,
                             int timeout_s);

// `zero _launch_agent ARGS...` as mpirun runs it: ARGS are Open MPI's (HOST, then the daemon's
// command). Runs $ZERO_LAUNCH_AGENT (default ssh) with them, passes termination signals on and
// returns its exit status; when the session ends badly without being asked to, it first prints
// "zero launch: lost host H (ranks ...)" on stderr.
int run_launch_agent(int argc, char** argv);

}  // namespace zero::cli
