// decide_on_rank0 over two ranks stood in without MPI: rank 0's run is played first and the
// bytes it broadcasts are what rank 1's broadcast returns. Every rank must end the same way:
// rank 0 with the check's own error, rank 1 with one of its kind and message, marked as said.
#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>
#include <string>

#include "cluster/decide_on_rank0.h"

using namespace ditbatch;

namespace {

// One rank of a two-rank world: rank 0 keeps what it broadcasts, rank 1 receives it.
struct StandInRank {
  int rank_ = 0;
  std::string* wire = nullptr;
  int rank() const { return rank_; }
  std::string broadcast(const std::string& bytes, int root) const {
    EXPECT_EQ(root, 0);
    if (rank_ == 0) *wire = bytes;
    return *wire;
  }
};

// How a rank left decide_on_rank0: the exit status the command line gives it, the message, and
// whether it would print it.
struct Ending {
  int status = 0;
  std::string message;
  bool printed = false;
  bool operator==(const Ending&) const = default;
};

template <typename Decide>
Ending ending(const StandInRank& rank, Decide&& decide) {
  try {
    decide_on_rank0(rank, decide);
  } catch (const std::exception& e) {
    return {dynamic_cast<const InputError*>(&e) ? 2 : 1, e.what(), !reported_by_rank0(e)};
  }
  return {};
}

// Rank 0's ending, then rank 1's from what rank 0 sent; `runs` counts the calls of the check.
template <typename Decide>
std::pair<Ending, Ending> both_ranks(Decide&& decide, int& runs) {
  std::string wire = "(nothing sent)";
  auto counted = [&] {
    ++runs;
    decide();
  };
  const Ending first = ending(StandInRank{0, &wire}, counted);
  const Ending second = ending(StandInRank{1, &wire}, counted);
  return {first, second};
}

}  // namespace

TEST(DecideOnRank0, APassedCheckRunsOnceAndEveryRankGoesOn) {
  int runs = 0;
  const auto [first, second] = both_ranks([] {}, runs);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(first, Ending{});
  EXPECT_EQ(second, Ending{});
}

TEST(DecideOnRank0, BadInputEndsEveryRankWithStatus2AndIsSaidOnce) {
  int runs = 0;
  const auto [first, second] = both_ranks([] { fail_input("p.txt: no prompts"); }, runs);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(first, (Ending{2, "p.txt: no prompts", true}));
  EXPECT_EQ(second, (Ending{2, "p.txt: no prompts", false}));
}

TEST(DecideOnRank0, AFailureEndsEveryRankWithStatus1) {
  int runs = 0;
  const auto [first, second] = both_ranks([] { fail("out/.lock: held by run 7"); }, runs);
  EXPECT_EQ(first, (Ending{1, "out/.lock: held by run 7", true}));
  EXPECT_EQ(second, (Ending{1, "out/.lock: held by run 7", false}));
  // Not an Error at all (a library's): a failure too.
  const auto [lib_first, lib_second] = both_ranks([] { throw std::out_of_range("vector::at"); }, runs);
  EXPECT_EQ(lib_first, (Ending{1, "vector::at", true}));
  EXPECT_EQ(lib_second, (Ending{1, "vector::at", false}));
}

TEST(DecideOnRank0, Rank0ThrowsTheChecksOwnError) {
  std::string wire;
  try {
    decide_on_rank0(StandInRank{0, &wire}, [] { throw std::out_of_range("vector::at"); });
    FAIL() << "no error";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "vector::at");
  }
  EXPECT_EQ(wire, "1vector::at");
}

TEST(DecideOnRank0, AnErrorWithoutAMessageIsStillAFailure) {
  int runs = 0;
  const auto [first, second] = both_ranks([] { throw InputError(""); }, runs);
  EXPECT_EQ(first, (Ending{2, "", true}));
  EXPECT_EQ(second, (Ending{2, "", false}));
}
