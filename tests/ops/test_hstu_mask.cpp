// test_hstu_mask.cpp — the HSTU attention mask (hstu_attend) and the rab index functions
// (rab_time_bucket, rab_pos_index).
//
// The mask is checked against an independent construction written from the SPEC §2 wording as
// sets of columns per row (contextual / history / target blocks), not as one predicate, for
// every small combination of contexts, targets, group sizes, windows and causality, plus a few
// matrices written out literally. spec_mask() is also the mask of the dense attention reference
// in test_hstu_attention.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "ops/hstu_attention.h"

namespace hstu::test {

// [L, L] row-major 0/1 mask of one sequence [contextual c | history L-c-t | targets t], built
// from the SPEC wording: every row sees the contextual columns; contextual rows see every
// contextual and history column; history rows see history causally (j <= i), limited to
// i - j <= w with a window; target rows see the history as if they stood at position L-t (so
// all of it, windowed from L-t) and the targets of their own group of g up to themselves;
// history rows never see targets; non-causal (no targets): every row sees all context/history.
std::vector<uint8_t> spec_mask(int L, int c, int t, int g, int w, bool causal) {
  const int hist_end = L - t;
  std::vector<uint8_t> m(static_cast<size_t>(L) * L, 0);
  for (int i = 0; i < L; ++i) {
    std::set<int> cols;
    for (int j = 0; j < c; ++j) cols.insert(j);  // contextual columns: visible to all
    const bool contextual_row = i < c, target_row = i >= hist_end;
    if (contextual_row || !causal) {
      for (int j = c; j < hist_end; ++j) cols.insert(j);
    } else {
      const int pos = target_row ? hist_end : i;  // where the row stands in the history
      for (int j = c; j < hist_end; ++j) {
        if (j <= pos && (w == 0 || pos - j <= w)) cols.insert(j);
      }
    }
    if (target_row) {
      const int group = (i - hist_end) / g;
      for (int j = hist_end + group * g; j <= i; ++j) cols.insert(j);
    }
    for (int j : cols) m[static_cast<size_t>(i) * L + j] = 1;
  }
  return m;
}

namespace {

std::vector<uint8_t> attend_mask(int L, int c, int t, int g, int w, bool causal) {
  std::vector<uint8_t> m(static_cast<size_t>(L) * L);
  for (int i = 0; i < L; ++i) {
    for (int j = 0; j < L; ++j)
      m[static_cast<size_t>(i) * L + j] = hstu_attend(i, j, L, c, t, g, w, causal);
  }
  return m;
}

std::string show(const std::vector<uint8_t>& m, int L) {
  std::string s;
  for (int i = 0; i < L; ++i) {
    s += "\n  ";
    for (int j = 0; j < L; ++j) s += m[static_cast<size_t>(i) * L + j] ? '1' : '.';
  }
  return s;
}

// Rows written as strings of 0/1.
std::vector<uint8_t> literal(const std::vector<std::string>& rows) {
  std::vector<uint8_t> m;
  for (const auto& r : rows) {
    for (char ch : r) m.push_back(ch == '1');
  }
  return m;
}

}  // namespace

TEST(HstuMask, MatchesSpecConstructionForAllCombinations) {
  int combos = 0;
  for (int c : {0, 1, 3}) {
    for (int t : {0, 1, 4}) {
      for (int g : {1, 2, 3}) {
        for (int w : {0, 2}) {
          for (bool causal : {true, false}) {
            if (!causal && t > 0) continue;  // non-causal is defined only without targets
            for (int extra : {0, 1, 2, 5, 9}) {
              const int L = c + t + extra;
              if (L == 0) continue;
              const auto want = spec_mask(L, c, t, g, w, causal);
              const auto got = attend_mask(L, c, t, g, w, causal);
              EXPECT_EQ(got, want)
                  << "L=" << L << " c=" << c << " t=" << t << " g=" << g << " w=" << w
                  << " causal=" << causal << "\nhstu_attend:" << show(got, L)
                  << "\nspec:" << show(want, L);
              ++combos;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(combos, 300);
}

// hstu_tile_kind against hstu_attend on every tile of every small geometry, tiles overhanging
// the sequence end included: skip means no visible pair inside the sequence, full every pair,
// causal exactly the pairs j <= i. Also checks that the cheap kinds are actually claimed.
TEST(HstuMask, TileKindAgreesWithAttendOnEveryTile) {
  int64_t tiles = 0, cheap = 0;
  for (int c : {0, 2, 5}) {
    for (int t : {0, 1, 4}) {
      for (int g : {1, 3}) {
        for (int w : {0, 3, 17}) {
          for (bool causal : {true, false}) {
            if (!causal && t > 0) continue;
            for (int L : {1, 7, 16, 23, 40}) {
              if (c + t > L) continue;
              for (int tm : {4, 8}) {
                for (int tn : {4, 16}) {
                  for (int r0 = 0; r0 < L + tm; r0 += tm) {
                    for (int c0 = 0; c0 < L + tn; c0 += tn) {
                      const int kind = hstu_tile_kind(r0, tm, c0, tn, L, c, t, g, w, causal);
                      int visible = 0, total = 0;
                      bool causal_shape = true;
                      for (int i = r0; i < std::min(r0 + tm, L); ++i) {
                        for (int j = c0; j < std::min(c0 + tn, L); ++j) {
                          const bool v = hstu_attend(i, j, L, c, t, g, w, causal);
                          visible += v;
                          ++total;
                          causal_shape = causal_shape && (v == (j <= i));
                        }
                      }
                      const std::string where =
                          "L=" + std::to_string(L) + " c=" + std::to_string(c) +
                          " t=" + std::to_string(t) + " g=" + std::to_string(g) +
                          " w=" + std::to_string(w) + " causal=" + std::to_string(causal) +
                          " tile r0=" + std::to_string(r0) + " x" + std::to_string(tm) +
                          " c0=" + std::to_string(c0) + " x" + std::to_string(tn) +
                          " kind=" + std::to_string(kind);
                      EXPECT_TRUE(kind != kTileSkip || visible == 0) << where;
                      EXPECT_TRUE(kind != kTileFull || visible == total) << where;
                      EXPECT_TRUE(kind != kTileCausal || causal_shape) << where;
                      EXPECT_TRUE(total == 0 || visible > 0 || kind == kTileSkip) << where;
                      cheap += kind == kTileFull || kind == kTileCausal;
                      ++tiles;
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(tiles, 10000);
  EXPECT_GT(cheap, tiles / 4);  // most visible tiles must not need the per-element test
}

// hstu_tile_kind's plain-causal path (no contexts, targets or window) gives the general form's
// kind on every tile of every geometry up to 70 tokens, tiles overhanging the end included.
TEST(HstuMask, PlainCausalTileKindEqualsGeneralForm) {
  int64_t tiles = 0;
  for (int L = 1; L <= 70; ++L)
    for (int tm : {1, 3, 8, 16, 64})
      for (int tn : {1, 4, 16, 64})
        for (int r0 = 0; r0 < L + tm; r0 += tm)
          for (int c0 = 0; c0 < L + tn; c0 += tn) {
            ASSERT_EQ(hstu_tile_kind(r0, tm, c0, tn, L, 0, 0, 1, 0, true),
                      hstu_tile_kind_general(r0, tm, c0, tn, L, 0, 0, 1, 0, true))
                << "L=" << L << " tile r0=" << r0 << " x" << tm << " c0=" << c0 << " x" << tn;
            ++tiles;
          }
  EXPECT_GT(tiles, 20000);
}

// hstu_key_block_end against hstu_attend: no query row of a block sees a key at or past the
// bound, for every mask geometry of TileKindAgreesWithAttendOnEveryTile; and under plain causal
// the bound is the block holding the rows' last key they see (nothing visible is cut off, nothing
// beyond the diagonal kept).
TEST(HstuMask, KeyBlockEndCutsOffNoVisibleKey) {
  int64_t blocks = 0, cut = 0;
  for (int c : {0, 2, 5})
    for (int t : {0, 1, 4})
      for (int g : {1, 3})
        for (int w : {0, 3, 17})
          for (bool causal : {true, false}) {
            if (!causal && t > 0) continue;
            for (int L : {1, 7, 16, 23, 40})
              for (int nr : {4, 8})
                for (int nc : {4, 16})
                  for (int r0 = 0; r0 < L; r0 += nr) {
                    const int end = hstu_key_block_end(r0, nr, nc, L, c, causal);
                    ASSERT_LE(end, (L + nc - 1) / nc);
                    for (int i = r0; i < std::min(r0 + nr, L); ++i)
                      for (int j = end * nc; j < L; ++j)
                        ASSERT_FALSE(hstu_attend(i, j, L, c, t, g, w, causal))
                            << "L=" << L << " c=" << c << " t=" << t << " g=" << g << " w=" << w
                            << " causal=" << causal << " rows " << r0 << " x" << nr << " keys of "
                            << nc << ": (" << i << ", " << j << ") visible past block " << end;
                    if (causal && c == 0 && t == 0 && w == 0) {
                      EXPECT_EQ(end, (std::min(r0 + nr, L) - 1) / nc + 1);
                    }
                    cut += end < (L + nc - 1) / nc;
                    ++blocks;
                  }
          }
  EXPECT_GT(blocks, 1000);
  EXPECT_GT(cut, blocks / 4);  // the bound must actually leave blocks out
}

// The diagonal tiles of plain causal attention are kTileCausal, also where they overhang L.
TEST(HstuMask, PlainCausalDiagonalTilesAreCausal) {
  EXPECT_EQ(hstu_tile_kind(192, 64, 192, 32, 200, 0, 0, 1, 0, true), kTileCausal);
  EXPECT_EQ(hstu_tile_kind(192, 64, 0, 32, 200, 0, 0, 1, 0, true), kTileFull);
  EXPECT_EQ(hstu_tile_kind(0, 64, 64, 32, 200, 0, 0, 1, 0, true), kTileSkip);
  EXPECT_EQ(hstu_tile_kind(0, 64, 32, 32, 200, 0, 0, 1, 0, true), kTileCausal);
  EXPECT_EQ(hstu_tile_kind(0, 64, 32, 32, 200, 0, 2, 1, 0, true), kTileCausal);  // targets later
  EXPECT_EQ(hstu_tile_kind(192, 64, 192, 32, 200, 0, 2, 1, 0, true), kTilePartial);
}

TEST(HstuMask, ContextAndSingleTargets) {  // L=6, c=1, t=2, g=1
  const auto want = literal({"111100",     // contextual row: contextual + history
                             "110000",     // history: context + causal
                             "111000",     //
                             "111100",     //
                             "111110",     // target: history + itself
                             "111101"});   // target: history + itself only
  EXPECT_EQ(attend_mask(6, 1, 2, 1, 0, true), want) << show(attend_mask(6, 1, 2, 1, 0, true), 6);
}

TEST(HstuMask, TargetGroups) {          // L=6, c=0, t=3, g=2: groups {3,4} and {5}
  const auto want = literal({"100000",  //
                             "110000",  //
                             "111000",  //
                             "111100",  //
                             "111110",  // sees the earlier target of its group
                             "111001"});
  EXPECT_EQ(attend_mask(6, 0, 3, 2, 0, true), want) << show(attend_mask(6, 0, 3, 2, 0, true), 6);
}

TEST(HstuMask, LocalWindowKeepsContext) {  // L=6, c=1, t=0, w=2
  const auto want = literal({"111111",     //
                             "110000",     //
                             "111000",     //
                             "111100",     //
                             "101110",     // window i-j <= 2, context always visible
                             "100111"});
  EXPECT_EQ(attend_mask(6, 1, 0, 1, 2, true), want) << show(attend_mask(6, 1, 0, 1, 2, true), 6);
}

TEST(HstuMask, WindowedTargetsMeasureFromHistoryEnd) {  // L=6, c=0, t=2, g=1, w=1
  const auto want = literal({"100000",                  //
                             "110000",                  //
                             "011000",                  //
                             "001100",                  //
                             "000110",  // target stands at position 4: sees history 3 (4-3 <= 1)
                             "000101"});
  EXPECT_EQ(attend_mask(6, 0, 2, 1, 1, true), want) << show(attend_mask(6, 0, 2, 1, 1, true), 6);
}

TEST(HstuMask, NonCausalSeesEverything) {
  EXPECT_EQ(attend_mask(4, 0, 0, 1, 0, false), std::vector<uint8_t>(16, 1));
}

TEST(HstuAttentionRab, TimeBucketMatchesMetaSamples) {
  const int64_t minute = 60, hour = 3600, day = 86400;
  const std::pair<int64_t, int> samples[] = {{minute, 13},    {hour, 27},     {day, 37},
                                             {7 * day, 44},   {30 * day, 49}, {365 * day, 57},
                                             {3650 * day, 65}};
  for (const auto& [dt, bucket] : samples) {
    EXPECT_EQ(rab_time_bucket(dt, 128), bucket) << "dt=" << dt;
    EXPECT_EQ(rab_time_bucket(-dt, 128), bucket) << "dt=" << -dt;  // |dt|
  }
  EXPECT_EQ(rab_time_bucket(0, 128), 0);
  EXPECT_EQ(rab_time_bucket(1, 128), 0);
  EXPECT_EQ(rab_time_bucket(2, 128), 2);           // ln 2 / 0.301 = 2.30
  EXPECT_EQ(rab_time_bucket(3650 * day, 40), 40);  // clamped to NB
  EXPECT_EQ(rab_time_bucket(int64_t(1) << 62, 128), 128);
}

TEST(HstuAttentionRab, PosIndexIsToeplitzAndClamped) {
  const int P = 5, n = 2 * P - 1;
  EXPECT_EQ(rab_pos_index(3, 3, n), P - 1);   // diagonal
  EXPECT_EQ(rab_pos_index(3, 0, n), P - 4);   // 3 steps back
  EXPECT_EQ(rab_pos_index(0, 2, n), P + 1);   // 2 steps ahead
  EXPECT_EQ(rab_pos_index(4, 0, n), 0);       // farthest back in range
  EXPECT_EQ(rab_pos_index(10, 0, n), 0);      // clamped below
  EXPECT_EQ(rab_pos_index(0, 10, n), n - 1);  // clamped above
  for (int i = 0; i < 12; ++i) {
    for (int j = 0; j < 12; ++j) {
      EXPECT_EQ(rab_pos_index(i, j, n), std::clamp(P - 1 + j - i, 0, n - 1));
    }
  }
}

}  // namespace hstu::test
