// comm.cpp — the host conveniences every backend shares and the one-rank local backend.
#include "dist/comm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/arena.h"

namespace hstu::dist {
namespace {

Tensor host_view(void* data, DType dtype, int64_t n) {
  return Tensor(data, dtype, Device::kCPU, {n});
}

}  // namespace

void Comm::host_all_gather(const Tensor& send, const Tensor& recv) {
  all_gather(send, recv);
}
void Comm::host_all_reduce(const Tensor& buf, ReduceOp op) {
  all_reduce(buf, op);
}
void Comm::host_all_to_all(const Tensor& send, const Tensor& recv) {
  const std::vector<int64_t> ones(static_cast<size_t>(size()), 1);
  all_to_all_v(send, ones, recv, ones);
}

std::vector<int64_t> Comm::all_gather_host(int64_t value) {
  std::vector<int64_t> out(static_cast<size_t>(size()));
  host_all_gather(host_view(&value, DType::kI64, 1), host_view(out.data(), DType::kI64, size()));
  return out;
}

int64_t Comm::all_reduce_host(int64_t value, ReduceOp op) {
  host_all_reduce(host_view(&value, DType::kI64, 1), op);
  return value;
}

double Comm::all_reduce_host(double value, ReduceOp op) {
  host_all_reduce(host_view(&value, DType::kF64, 1), op);
  return value;
}

std::vector<int64_t> Comm::all_to_all_host(std::span<const int64_t> send) {
  HSTU_CHECK(static_cast<int>(send.size()) == size(), "all_to_all_host: ", send.size(),
             " values for ", size(), " ranks");
  std::vector<int64_t> in(send.begin(), send.end()), out(send.size());
  host_all_to_all(host_view(in.data(), DType::kI64, size()),
                  host_view(out.data(), DType::kI64, size()));
  return out;
}

void Comm::check_same(uint64_t value, const std::string& what) {
  const std::vector<int64_t> all = all_gather_host(static_cast<int64_t>(value));
  for (int64_t v : all)
    if (v != all[0]) {
      std::ostringstream os;
      os << "ranks disagree on " << what << ":";
      for (size_t r = 0; r < all.size(); ++r)
        os << (r ? "," : "") << " rank " << r << " = " << std::hex << static_cast<uint64_t>(all[r])
           << std::dec;
      HSTU_THROW(os.str());
    }
}

namespace {

// One rank: collectives are copies (or nothing), on the buffer's device.
class LocalComm final : public Comm {
 public:
  explicit LocalComm(Device device) : Comm(0, 1), device_(device) {}
  const char* backend() const override { return "local"; }
  Device device() const override { return device_; }
  void all_reduce(const Tensor&, ReduceOp, void*) override {}
  void broadcast(const Tensor&, int root, void*) override {
    HSTU_CHECK(root == 0, "broadcast from rank ", root, " of a 1-rank job");
  }
  void all_gather(const Tensor& send, const Tensor& recv, void* stream) override {
    copy(send, recv, send.numel(), stream);
  }
  void all_gather_v(const Tensor& send, const Tensor& recv, std::span<const int64_t> counts,
                    void* stream) override {
    HSTU_CHECK(counts.size() == 1, "all_gather_v: ", counts.size(), " counts for 1 rank");
    copy(send, recv, counts[0] * row(send), stream);
  }
  void all_to_all_v(const Tensor& send, std::span<const int64_t> send_counts, const Tensor& recv,
                    std::span<const int64_t> recv_counts, void* stream) override {
    HSTU_CHECK(
        send_counts.size() == 1 && recv_counts.size() == 1 && send_counts[0] == recv_counts[0],
        "all_to_all_v: counts do not match on a 1-rank job");
    copy(send, recv, send_counts[0] * row(send), stream);
  }
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::_Exit(code); }

 private:
  static int64_t row(const Tensor& t) { return t.ndim <= 1 ? 1 : t.row_elems(); }
  void copy(const Tensor& src, const Tensor& dst, int64_t elems, void* stream) {
    HSTU_CHECK(src.dtype == dst.dtype, "collective: send and recv dtypes differ");
    HSTU_CHECK(src.contiguous() && dst.contiguous(), "collective buffers must be contiguous");
    HSTU_CHECK(elems <= dst.numel() && elems <= src.numel(), "collective: ", elems,
               " elements do not fit the buffers");
    const size_t bytes = static_cast<size_t>(elems) * dtype_size(src.dtype);
    if (bytes == 0 || src.data == dst.data) return;
    if (stream)
      copy_bytes_async(dst.data, dst.device, src.data, src.device, bytes, stream);
    else
      copy_bytes(dst.data, dst.device, src.data, src.device, bytes);
  }
  Device device_;
};

}  // namespace

std::unique_ptr<Comm> make_local_comm(Device device) {
  return std::make_unique<LocalComm>(device);
}

}  // namespace hstu::dist
