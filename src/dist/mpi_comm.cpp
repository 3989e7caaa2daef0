// mpi_comm.cpp — the MPI backend: CPU ranks on MPI_COMM_WORLD (OpenMPI from the distribution's
// packages), so every distributed code path runs and is tested on CPU processes under mpirun.
//
// Every call maps to one MPI collective on host buffers. Counts beyond INT_MAX elements use a
// contiguous row datatype, so large tables move in one call.
#include "dist/comm.h"

#if defined(HSTU_WITH_MPI)
#define OMPI_SKIP_MPICXX 1  // the C API only: the deprecated C++ bindings do not build cleanly
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include "core/checked.h"
#endif

namespace hstu::dist {

#if defined(HSTU_WITH_MPI)
namespace {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kU8:
      return MPI_UINT8_T;
    case DType::kBF16:
    case DType::kF16:
      return MPI_UINT16_T;  // moved, never reduced
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
  }
  return MPI_SUM;
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  HSTU_THROW("MPI ", what, " failed: ", std::string(msg, static_cast<size_t>(len)));
}

void check_host(const Tensor& t, const char* what) {
  HSTU_CHECK(t.device == Device::kCPU, "MPI ", what, ": buffers must be on the CPU");
  HSTU_CHECK(t.contiguous(), "MPI ", what, ": buffers must be contiguous");
}

int64_t row_elems(const Tensor& t) {
  return t.ndim <= 1 ? 1 : t.row_elems();
}

// A datatype of `elems` consecutive elements of t's dtype (freed by the caller), so counts in
// rows stay below INT_MAX for any table.
MPI_Datatype row_type(DType t, int64_t elems) {
  MPI_Datatype dt;
  check(MPI_Type_contiguous(checked_i32(elems, "row width"), mpi_type(t), &dt), "Type_contiguous");
  check(MPI_Type_commit(&dt), "Type_commit");
  return dt;
}

class MpiComm final : public Comm {
 public:
  MpiComm(int rank, int size) : Comm(rank, size) {}
  const char* backend() const override { return "mpi"; }
  Device device() const override { return Device::kCPU; }

  void all_reduce(const Tensor& buf, ReduceOp op, void*) override {
    check_host(buf, "all_reduce");
    HSTU_CHECK(buf.dtype == DType::kF32 || buf.dtype == DType::kF64 || buf.dtype == DType::kI32 ||
                   buf.dtype == DType::kI64 || (buf.dtype == DType::kU8 && op != ReduceOp::kSum),
               "all_reduce of ", dtype_name(buf.dtype), " is not supported");
    // Chunks below INT_MAX elements (a reduction cannot use a row datatype with built-in ops).
    char* p = static_cast<char*>(buf.data);
    for (int64_t done = 0, n = buf.numel(); done < n;) {
      const int64_t c = std::min<int64_t>(n - done, INT_MAX);
      check(MPI_Allreduce(MPI_IN_PLACE, p + done * dtype_size(buf.dtype), static_cast<int>(c),
                          mpi_type(buf.dtype), mpi_op(op), MPI_COMM_WORLD),
            "Allreduce");
      done += c;
    }
  }

  void broadcast(const Tensor& buf, int root, void*) override {
    check_host(buf, "broadcast");
    const int64_t w = row_elems(buf);
    MPI_Datatype dt = row_type(buf.dtype, w);
    check(MPI_Bcast(buf.data, checked_i32(buf.numel() / w, "broadcast rows"), dt, root,
                    MPI_COMM_WORLD),
          "Bcast");
    MPI_Type_free(&dt);
  }

  void all_gather(const Tensor& send, const Tensor& recv, void*) override {
    check_host(send, "all_gather");
    check_host(recv, "all_gather");
    HSTU_CHECK(recv.numel() == send.numel() * size(), "all_gather: recv holds ", recv.numel(),
               " elements, needs ", send.numel() * size());
    const int64_t w = std::max<int64_t>(send.numel(), 1);
    MPI_Datatype dt = row_type(send.dtype, w);
    check(MPI_Allgather(send.data, send.numel() > 0 ? 1 : 0, dt, recv.data,
                        send.numel() > 0 ? 1 : 0, dt, MPI_COMM_WORLD),
          "Allgather");
    MPI_Type_free(&dt);
  }

  void all_gather_v(const Tensor& send, const Tensor& recv, std::span<const int64_t> counts,
                    void*) override {
    check_host(send, "all_gather_v");
    check_host(recv, "all_gather_v");
    HSTU_CHECK(static_cast<int>(counts.size()) == size(), "all_gather_v: ", counts.size(),
               " counts for ", size(), " ranks");
    const int64_t w = row_elems(recv);
    std::vector<int> cnt(counts.size()), displ(counts.size());
    int64_t total = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      cnt[r] = checked_i32(counts[r], "all_gather_v rows");
      displ[r] = checked_i32(total, "all_gather_v offset");
      total += counts[r];
    }
    HSTU_CHECK(total * w <= recv.numel(), "all_gather_v: ", total, " rows do not fit recv");
    HSTU_CHECK(counts[static_cast<size_t>(rank())] * w <= send.numel(),
               "all_gather_v: send holds fewer rows than this rank's count");
    MPI_Datatype dt = row_type(recv.dtype, w);
    check(MPI_Allgatherv(send.data, cnt[static_cast<size_t>(rank())], dt, recv.data, cnt.data(),
                         displ.data(), dt, MPI_COMM_WORLD),
          "Allgatherv");
    MPI_Type_free(&dt);
  }

  void all_to_all_v(const Tensor& send, std::span<const int64_t> send_counts, const Tensor& recv,
                    std::span<const int64_t> recv_counts, void*) override {
    check_host(send, "all_to_all_v");
    check_host(recv, "all_to_all_v");
    HSTU_CHECK(send.dtype == recv.dtype, "all_to_all_v: send and recv dtypes differ");
    HSTU_CHECK(static_cast<int>(send_counts.size()) == size() &&
                   static_cast<int>(recv_counts.size()) == size(),
               "all_to_all_v: counts for ", send_counts.size(), "/", recv_counts.size(),
               " ranks, the job has ", size());
    const int64_t w = send.ndim > 1 ? row_elems(send) : row_elems(recv);
    std::vector<int> sc(send_counts.size()), sd(sc.size()), rc(sc.size()), rd(sc.size());
    int64_t st = 0, rt = 0;
    for (size_t p = 0; p < sc.size(); ++p) {
      sc[p] = checked_i32(send_counts[p], "all_to_all_v rows");
      rc[p] = checked_i32(recv_counts[p], "all_to_all_v rows");
      sd[p] = checked_i32(st, "all_to_all_v offset");
      rd[p] = checked_i32(rt, "all_to_all_v offset");
      st += send_counts[p];
      rt += recv_counts[p];
    }
    HSTU_CHECK(st * w <= send.numel() && rt * w <= recv.numel(),
               "all_to_all_v: counts exceed the buffers (", st, " rows to send, ", rt,
               " to receive, width ", w, ")");
    MPI_Datatype dt = row_type(send.dtype, w);
    check(MPI_Alltoallv(send.data, sc.data(), sd.data(), dt, recv.data, rc.data(), rd.data(), dt,
                        MPI_COMM_WORLD),
          "Alltoallv");
    MPI_Type_free(&dt);
  }

  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "Barrier"); }

  [[noreturn]] void abort(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }
};

// Finalises MPI at exit when hstu initialised it (a clean exit of every rank).
void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

bool mpi_available() {
  return true;
}

std::unique_ptr<Comm> make_mpi_comm() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "Init_thread");
    std::atexit(finalize_at_exit);
  }
  // Errors come back as codes (turned into hstu::Error), not as an abort inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return std::make_unique<MpiComm>(rank, size);
}

#else

bool mpi_available() {
  return false;
}

std::unique_ptr<Comm> make_mpi_comm() {
  HSTU_THROW(
      "this hstu binary was built without MPI, which CPU ranks need; install OpenMPI "
      "(apt-get install libopenmpi-dev openmpi-bin) and rebuild");
}

#endif

}  // namespace hstu::dist
