// nccl_comm.cpp — dist::Comm over NCCL for GPU ranks: a non-blocking communicator with a start-up
// deadline and a watchdog (watchdog.h), collectives on the caller's stream, ragged exchanges as
// grouped ncclSend/ncclRecv with host-side row counts.
#include "dist/nccl_comm.h"

#include "core/error.h"

#if defined(HSTU_WITH_NCCL)
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda_check.h"
#include "dist/watchdog.h"
#endif

namespace hstu::dist {

#if defined(HSTU_WITH_NCCL)
namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(NcclId), "NCCL_UNIQUE_ID_BYTES is not 128");

using Clock = std::chrono::steady_clock;

Clock::time_point deadline_after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

ncclDataType_t reduce_type(DType t) {
  switch (t) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kU8:  // flags, reduced with max / min
      return ncclUint8;
    default:
      HSTU_THROW("NCCL all_reduce of ", dtype_name(t),
                 " is not supported (f32, f64, i32, i64, u8)");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

int64_t row_elems(const Tensor& t) {
  return t.ndim <= 1 ? 1 : t.row_elems();
}

// Rank-order prefix sums of row counts.
std::vector<int64_t> offsets(std::span<const int64_t> counts, const char* what) {
  std::vector<int64_t> off(counts.size() + 1, 0);
  for (size_t p = 0; p < counts.size(); ++p) {
    HSTU_CHECK(counts[p] >= 0, what, ": a negative row count (", counts[p], ")");
    off[p + 1] = off[p] + counts[p];
  }
  return off;
}

class NcclComm final : public Comm {
 public:
  NcclComm(int rank, int size, ncclComm_t comm, int device, double timeout_s)
      : Comm(rank, size), comm_(comm), device_(device), timeout_s_(timeout_s) {
    HSTU_CUDA_CHECK(cudaStreamCreateWithFlags(&own_stream_, cudaStreamNonBlocking));
    watchdog_ = std::make_unique<Watchdog>(rank, timeout_s,
                                           Watchdog::Hooks{[this] { return async_error(); },
                                                           [this] {
                                                             aborted_ = true;
                                                             ncclCommAbort(comm_);
                                                           }});
  }

  ~NcclComm() override {
    watchdog_.reset();
    if (staging_) cudaFree(staging_);
    // A clean shutdown flushes and frees the communicator; one that cannot finish in time is
    // aborted (a peer died), never waited on forever.
    ncclResult_t st = aborted_ ? ncclInternalError : ncclCommFinalize(comm_);
    const auto deadline = deadline_after(timeout_s_);
    while (st == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (ncclCommGetAsyncError(comm_, &st) != ncclSuccess) st = ncclInternalError;
    }
    if (st == ncclSuccess)
      ncclCommDestroy(comm_);
    else
      ncclCommAbort(comm_);
    cudaStreamDestroy(own_stream_);
  }

  const char* backend() const override { return "nccl"; }
  Device device() const override { return Device::kCUDA; }

  void all_reduce(const Tensor& buf, ReduceOp op, void* stream) override {
    check_device(buf, "all_reduce");
    if (buf.numel() == 0) return;
    done(ncclAllReduce(buf.data, buf.data, static_cast<size_t>(buf.numel()), reduce_type(buf.dtype),
                       nccl_op(op), comm_, as_stream(stream)),
         "ncclAllReduce");
  }

  void broadcast(const Tensor& buf, int root, void* stream) override {
    check_device(buf, "broadcast");
    HSTU_CHECK(root >= 0 && root < size(), "broadcast from rank ", root, " of a ", size(),
               "-rank job");
    if (buf.numel() == 0) return;
    done(ncclBroadcast(buf.data, buf.data, buf.nbytes(), ncclUint8, root, comm_, as_stream(stream)),
         "ncclBroadcast");
  }

  void all_gather(const Tensor& send, const Tensor& recv, void* stream) override {
    check_device(send, "all_gather");
    check_device(recv, "all_gather");
    HSTU_CHECK(send.dtype == recv.dtype, "all_gather: send and recv dtypes differ");
    HSTU_CHECK(recv.numel() == send.numel() * size(), "all_gather: recv holds ", recv.numel(),
               " elements, needs ", send.numel() * size());
    if (send.numel() == 0) return;
    done(ncclAllGather(send.data, recv.data, send.nbytes(), ncclUint8, comm_, as_stream(stream)),
         "ncclAllGather");
  }

  void all_gather_v(const Tensor& send, const Tensor& recv, std::span<const int64_t> counts,
                    void* stream) override {
    check_device(send, "all_gather_v");
    check_device(recv, "all_gather_v");
    HSTU_CHECK(send.dtype == recv.dtype, "all_gather_v: send and recv dtypes differ");
    HSTU_CHECK(static_cast<int>(counts.size()) == size(), "all_gather_v: ", counts.size(),
               " counts for ", size(), " ranks");
    const int64_t w = row_elems(recv);
    const size_t row_bytes = static_cast<size_t>(w) * dtype_size(recv.dtype);
    const std::vector<int64_t> off = offsets(counts, "all_gather_v");
    const int64_t mine = counts[static_cast<size_t>(rank())];
    HSTU_CHECK(off.back() * w <= recv.numel(), "all_gather_v: ", off.back(),
               " rows do not fit recv");
    HSTU_CHECK(mine * w <= send.numel(), "all_gather_v: send holds fewer rows than this rank's ",
               mine);
    cudaStream_t s = as_stream(stream);
    char* out = static_cast<char*>(recv.data);
    copy_to_self(out + off[static_cast<size_t>(rank())] * row_bytes, send.data,
                 static_cast<size_t>(mine) * row_bytes, s);
    group_start();
    for (int p = 0; p < size(); ++p) {
      if (p == rank()) continue;
      if (mine > 0)
        done(ncclSend(send.data, static_cast<size_t>(mine) * row_bytes, ncclUint8, p, comm_, s),
             "ncclSend");
      const int64_t n = counts[static_cast<size_t>(p)];
      if (n > 0)
        done(ncclRecv(out + off[static_cast<size_t>(p)] * row_bytes,
                      static_cast<size_t>(n) * row_bytes, ncclUint8, p, comm_, s),
             "ncclRecv");
    }
    group_end();
  }

  void all_to_all_v(const Tensor& send, std::span<const int64_t> send_counts, const Tensor& recv,
                    std::span<const int64_t> recv_counts, void* stream) override {
    check_device(send, "all_to_all_v");
    check_device(recv, "all_to_all_v");
    HSTU_CHECK(send.dtype == recv.dtype, "all_to_all_v: send and recv dtypes differ");
    HSTU_CHECK(static_cast<int>(send_counts.size()) == size() &&
                   static_cast<int>(recv_counts.size()) == size(),
               "all_to_all_v: counts for ", send_counts.size(), "/", recv_counts.size(),
               " ranks, the job has ", size());
    const int64_t w = send.ndim > 1 ? row_elems(send) : row_elems(recv);
    const size_t row_bytes = static_cast<size_t>(w) * dtype_size(send.dtype);
    const std::vector<int64_t> so = offsets(send_counts, "all_to_all_v");
    const std::vector<int64_t> ro = offsets(recv_counts, "all_to_all_v");
    HSTU_CHECK(so.back() * w <= send.numel() && ro.back() * w <= recv.numel(),
               "all_to_all_v: counts exceed the buffers (", so.back(), " rows to send, ", ro.back(),
               " to receive, width ", w, ")");
    const size_t me = static_cast<size_t>(rank());
    HSTU_CHECK(send_counts[me] == recv_counts[me], "all_to_all_v: rank ", rank(), " sends itself ",
               send_counts[me], " rows but expects ", recv_counts[me]);
    cudaStream_t s = as_stream(stream);
    const char* in = static_cast<const char*>(send.data);
    char* out = static_cast<char*>(recv.data);
    copy_to_self(out + ro[me] * row_bytes, in + so[me] * row_bytes,
                 static_cast<size_t>(send_counts[me]) * row_bytes, s);
    group_start();
    for (int p = 0; p < size(); ++p) {
      const size_t q = static_cast<size_t>(p);
      if (p == rank()) continue;
      if (send_counts[q] > 0)
        done(ncclSend(in + so[q] * row_bytes, static_cast<size_t>(send_counts[q]) * row_bytes,
                      ncclUint8, p, comm_, s),
             "ncclSend");
      if (recv_counts[q] > 0)
        done(ncclRecv(out + ro[q] * row_bytes, static_cast<size_t>(recv_counts[q]) * row_bytes,
                      ncclUint8, p, comm_, s),
             "ncclRecv");
    }
    group_end();
  }

  void barrier() override {
    void* d = staging(sizeof(int32_t));
    done(ncclAllReduce(d, d, 1, ncclInt32, ncclSum, comm_, own_stream_), "ncclAllReduce");
    HSTU_CUDA_CHECK(cudaStreamSynchronize(own_stream_));
  }

  [[noreturn]] void abort(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    aborted_ = true;
    ncclCommAbort(comm_);
    std::_Exit(code);
  }

 protected:
  // Host tensors: copied into the staging buffer, reduced/gathered there, copied back; synchronous.
  void host_all_gather(const Tensor& send, const Tensor& recv) override {
    char* d = static_cast<char*>(staging(send.nbytes() + recv.nbytes()));
    const Tensor ds(d, send.dtype, Device::kCUDA, {send.numel()});
    const Tensor dr(d + send.nbytes(), recv.dtype, Device::kCUDA, {recv.numel()});
    upload(ds, send);
    all_gather(ds, dr, own_stream_);
    download(recv, dr);
  }
  void host_all_reduce(const Tensor& buf, ReduceOp op) override {
    const Tensor d(staging(buf.nbytes()), buf.dtype, Device::kCUDA, {buf.numel()});
    upload(d, buf);
    all_reduce(d, op, own_stream_);
    download(buf, d);
  }
  void host_all_to_all(const Tensor& send, const Tensor& recv) override {
    char* d = static_cast<char*>(staging(send.nbytes() + recv.nbytes()));
    const Tensor ds(d, send.dtype, Device::kCUDA, {send.numel()});
    const Tensor dr(d + send.nbytes(), recv.dtype, Device::kCUDA, {recv.numel()});
    upload(ds, send);
    const std::vector<int64_t> ones(static_cast<size_t>(size()), 1);
    all_to_all_v(ds, ones, dr, ones, own_stream_);
    download(recv, dr);
  }

 private:
  static cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

  void check_device(const Tensor& t, const char* what) const {
    HSTU_CHECK(t.device == Device::kCUDA, "NCCL ", what, ": buffers must be on the GPU");
    HSTU_CHECK(t.contiguous(), "NCCL ", what, ": buffers must be contiguous");
  }

  // Completes a call on the non-blocking communicator: ncclInProgress means NCCL is still
  // enqueuing it, and the communicator must be ready before the next call.
  void done(ncclResult_t rc, const char* what) {
    if (rc == ncclInProgress) {
      const auto deadline = deadline_after(timeout_s_);
      do {
        if (ncclCommGetAsyncError(comm_, &rc) != ncclSuccess) break;
        if (rc == ncclInProgress) {
          HSTU_CHECK(Clock::now() < deadline, "rank ", rank(), ": NCCL ", what,
                     " did not finish enqueuing within ", timeout_s_, " s (HSTU_DIST_TIMEOUT)");
          std::this_thread::yield();
        }
      } while (rc == ncclInProgress);
    }
    if (rc != ncclSuccess)
      HSTU_THROW("rank ", rank(), ": ", what, " failed: ", ncclGetErrorString(rc), " (",
                 ncclGetLastError(comm_), ")");
  }
  void group_start() { done(ncclGroupStart(), "ncclGroupStart"); }
  void group_end() { done(ncclGroupEnd(), "ncclGroupEnd"); }

  void copy_to_self(void* dst, const void* src, size_t bytes, cudaStream_t s) {
    if (bytes == 0 || dst == src) return;
    HSTU_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
  }

  // The staging buffer, grown to at least `bytes` (the previous contents are not kept).
  void* staging(size_t bytes) {
    bytes = std::max<size_t>(bytes, 256);
    if (bytes > staging_bytes_) {
      HSTU_CUDA_CHECK(cudaStreamSynchronize(own_stream_));
      if (staging_) HSTU_CUDA_CHECK(cudaFree(staging_));
      staging_ = nullptr;
      HSTU_CUDA_CHECK(cudaMalloc(&staging_, bytes));
      staging_bytes_ = bytes;
    }
    return staging_;
  }
  void upload(const Tensor& dev, const Tensor& host) {
    HSTU_CHECK(host.device == Device::kCPU && host.contiguous(),
               "host collective: not a host "
               "tensor");
    HSTU_CUDA_CHECK(
        cudaMemcpyAsync(dev.data, host.data, host.nbytes(), cudaMemcpyHostToDevice, own_stream_));
  }
  void download(const Tensor& host, const Tensor& dev) {
    HSTU_CUDA_CHECK(
        cudaMemcpyAsync(host.data, dev.data, host.nbytes(), cudaMemcpyDeviceToHost, own_stream_));
    HSTU_CUDA_CHECK(cudaStreamSynchronize(own_stream_));
  }

  // The communicator's asynchronous error as a message ("" while healthy).
  std::string async_error() {
    if (aborted_) return {};
    ncclResult_t st = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &st) != ncclSuccess) return "ncclCommGetAsyncError failed";
    if (st == ncclSuccess || st == ncclInProgress) return {};
    return std::string("NCCL asynchronous error: ") + ncclGetErrorString(st) + " (" +
           ncclGetLastError(comm_) + ")";
  }

  ncclComm_t comm_;
  int device_;
  double timeout_s_;
  cudaStream_t own_stream_ = nullptr;  // host conveniences and barrier
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
  std::atomic<bool> aborted_{false};
  std::unique_ptr<Watchdog> watchdog_;  // last: stops before the members above go
};

}  // namespace

bool nccl_available() {
  return true;
}
void require_nccl() {}

NcclId nccl_unique_id() {
  ncclUniqueId uid;
  const ncclResult_t rc = ncclGetUniqueId(&uid);
  HSTU_CHECK(rc == ncclSuccess, "ncclGetUniqueId failed: ", ncclGetErrorString(rc),
             " (is a network interface up? NCCL_SOCKET_IFNAME picks one)");
  NcclId id;
  std::memcpy(id.data(), &uid, id.size());
  return id;
}

std::unique_ptr<Comm> make_nccl_comm(int rank, int world, const NcclId& id, int cuda_device,
                                     double timeout_s) {
  HSTU_CHECK(world >= 1 && rank >= 0 && rank < world, "NCCL: rank ", rank, " of ", world);
  HSTU_CUDA_CHECK(cudaSetDevice(cuda_device));
  ncclUniqueId uid;
  std::memcpy(&uid, id.data(), id.size());
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // start-up returns at once; the wait below has a deadline
  ncclComm_t comm = nullptr;
  ncclResult_t rc = ncclCommInitRankConfig(&comm, world, uid, rank, &config);
  const auto deadline = deadline_after(timeout_s);
  while (rc == ncclInProgress && comm != nullptr) {
    if (Clock::now() >= deadline) {
      ncclCommAbort(comm);
      HSTU_THROW("rank ", rank, ": the NCCL communicator of ", world,
                 " ranks did not start within ", timeout_s,
                 " s (HSTU_DIST_TIMEOUT): a rank is missing or cannot reach this one "
                 "(NCCL_SOCKET_IFNAME, NCCL_DEBUG=INFO tell more)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (ncclCommGetAsyncError(comm, &rc) != ncclSuccess) break;
  }
  if (rc != ncclSuccess) {
    const std::string detail = comm ? ncclGetLastError(comm) : "";
    if (comm) ncclCommAbort(comm);
    HSTU_THROW("rank ", rank, ": NCCL communicator start-up failed on GPU ", cuda_device, ": ",
               ncclGetErrorString(rc), detail.empty() ? "" : " (" + detail + ")");
  }
  return std::make_unique<NcclComm>(rank, world, comm, cuda_device, timeout_s);
}

#else  // no NCCL in this build

namespace {
[[noreturn]] void no_nccl() {
#if defined(HSTU_WITH_CUDA)
  HSTU_THROW(
      "this hstu binary was built without NCCL, which GPU ranks of a multi-GPU job need: "
      "install NCCL (nccl.h and libnccl.so, e.g. libnccl-dev) and reconfigure the build");
#else
  HSTU_THROW(
      "this hstu binary was built without CUDA, so it has no NCCL backend for GPU ranks; "
      "CPU ranks run under MPI (mpirun)");
#endif
}
}  // namespace

bool nccl_available() {
  return false;
}
void require_nccl() {
  no_nccl();
}
NcclId nccl_unique_id() {
  no_nccl();
}
std::unique_ptr<Comm> make_nccl_comm(int, int, const NcclId&, int, double) {
  no_nccl();
}

#endif

}  // namespace hstu::dist
