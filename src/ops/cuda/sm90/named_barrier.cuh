// named_barrier.cuh — the named barriers of the sm_90a attention kernels: bar.sync / bar.arrive
// on hardware barriers 1..15 (0 is __syncthreads), logical id b = hardware id b + 1.
//
// Why not cutlass::arch::NamedBarrier: it adds 8 ids reserved for CUTLASS's own epilogues and
// transposes, leaving user ids 0..7 (hardware 8..15), and the kernels need up to 12 (the rab
// backward: the consumers' shared barrier, one per warpgroup for the epilogue, the rab tiles and
// the rab gradient; the forward: the epilogue, the ping-pong schedule, the rab tiles). ids past 7
// reached hardware ids 16..19, outside bar.sync's range. These kernels run no CUTLASS code that
// takes named barriers (their pipelines are mbarriers), so every hardware id but 0 is theirs.
#pragma once

namespace hstu::cuda::attn::sm90 {

// All `threads` threads (a multiple of 32) arrive at barrier b (0..14) and wait for each other.
__device__ __forceinline__ void named_bar_sync(int threads, int b) {
  asm volatile("bar.sync %0, %1;" ::"r"(b + 1), "r"(threads) : "memory");
}
// Arrives at barrier b without waiting (the producer side of a hand-off to bar.sync).
__device__ __forceinline__ void named_bar_arrive(int threads, int b) {
  asm volatile("bar.arrive %0, %1;" ::"r"(b + 1), "r"(threads) : "memory");
}

}  // namespace hstu::cuda::attn::sm90
