// nccl_comm.h — the NCCL backend of dist::Comm: one GPU per process, collectives enqueued on the
// caller's CUDA stream (ncclAllReduce, ncclBroadcast, ncclAllGather; ragged gathers and
// all-to-alls as grouped ncclSend/ncclRecv), host conveniences staged through a small device
// buffer.
//
// Failure behaviour: the communicator is created non-blocking and its start-up waits at most
// `timeout_s` (HSTU_DIST_TIMEOUT); a watchdog thread (watchdog.h) polls ncclCommGetAsyncError and
// the heartbeat and, on an error or `timeout_s` without a heartbeat, aborts the communicator and
// exits the process, so no rank hangs. NCCL's own environment (NCCL_SOCKET_IFNAME, NCCL_DEBUG,
// NCCL_NVLS_ENABLE, ...) is left exactly as the process got it.
//
// Builds without NCCL (HSTU_WITH_NCCL: CUDA builds that found nccl.h and libnccl) keep these
// declarations; nccl_available() is false and the other functions throw saying so.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "dist/comm.h"

namespace hstu::dist {

// NCCL's unique id (ncclUniqueId, NCCL_UNIQUE_ID_BYTES = 128), as bytes for the bootstrap.
using NcclId = std::array<uint8_t, 128>;

// True when this build has the NCCL backend.
bool nccl_available();
// Throws, saying why and what to install, when !nccl_available().
void require_nccl();
// A fresh id (ncclGetUniqueId); rank 0 makes it and the bootstrap hands it to the others.
NcclId nccl_unique_id();
// The communicator of `world` ranks that share `id`, as rank `rank`, on CUDA device
// `cuda_device` (made current here). Collective: every rank calls it; throws when not every rank
// joins within timeout_s.
std::unique_ptr<Comm> make_nccl_comm(int rank, int world, const NcclId& id, int cuda_device,
                                     double timeout_s);

}  // namespace hstu::dist
