// bootstrap.h — what the ranks of a job agree on before their NCCL communicator exists: rank 0's
// 128-byte NCCL unique id, and a 64-bit job hash (config + build) that must be equal on every rank,
// so ranks started with different configs or binaries stop at start-up with a message naming them.
//
// Two transports: an MPI launch broadcasts over MPI (comm_bootstrap); any other launch uses a
// tiny TCP rendezvous (tcp_bootstrap): rank 0 listens on the bootstrap port, every other rank
// connects (retrying until the deadline), sends its rank and job hash, and receives the payload
// once every rank has checked in. It is a key exchange, not a collective algorithm; plain POSIX
// sockets, IPv4.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace hstu::dist {

class Comm;

// A hash of this binary's build: compiler, C++ standard, CUDA/NCCL/MPI availability and
// versions, CUDA architectures. Ranks of one job must run the same build.
uint64_t build_hash();
// The job hash the ranks compare: FNV-1a of `config_text` (the effective config, e.g. to_gin)
// mixed with build_hash().
uint64_t job_hash(std::string_view config_text);

struct TcpBootstrap {
  std::string master_addr;  // rank 0's host (the others connect to it; rank 0 listens on all)
  int port = 0;             // WorldEnv::bootstrap_port
  int rank = 0;
  int world_size = 1;
  double timeout_s = 600;  // dist_timeout_seconds()
};

// Rank 0 sends `payload` to every other rank, which receives it into `payload` (same size on every
// rank). Every rank's job hash is compared with rank 0's: on any mismatch every rank throws,
// naming the ranks that differ. Throws when rank 0 cannot listen, when a rank cannot reach rank 0
// or when not every rank checks in within the deadline (naming the missing ranks).
void tcp_bootstrap(const TcpBootstrap& args, std::span<uint8_t> payload, uint64_t job_hash);

// The same over an existing communicator (an MPI launch): check_same of the job hash, then a
// broadcast of the payload from rank 0.
void comm_bootstrap(Comm& comm, std::span<uint8_t> payload, uint64_t job_hash);

}  // namespace hstu::dist
