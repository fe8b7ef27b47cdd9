// A check made once, on rank 0 (it reads the prompt file, the weight file's header, the output
// folder), whose failure must end every rank the same way: rank 0 runs it and broadcasts the
// verdict; on a failure rank 0 throws what the check threw, and every other rank throws an error
// of the same kind with the same message (InputError: exit 2; any other: exit 1), marked as
// said by rank 0 so that the job's log holds the message once, not once per rank.
#pragma once

#include <exception>
#include <string>

#include "core/error.h"

namespace ditbatch {

// The mark of an error another rank (rank 0) has already reported.
class ReportedByRank0 {
 public:
  virtual ~ReportedByRank0() = default;
};

template <typename Kind>
class ErrorOfRank0 : public Kind, public ReportedByRank0 {
 public:
  using Kind::Kind;
};

inline bool reported_by_rank0(const std::exception& e) { return dynamic_cast<const ReportedByRank0*>(&e) != nullptr; }

// `world`: a World, or anything with rank() and broadcast(bytes, root) (the tests stand in two
// ranks without MPI). Collective: every rank calls it, and only rank 0 runs `decide`.
template <typename Collective, typename Decide>
void decide_on_rank0(const Collective& world, Decide&& decide) {
  // "" when the check passed, else the error's kind ('2': InputError, '1': any other) and its
  // message: an empty message is still a failure.
  std::string verdict;
  std::exception_ptr failure;
  if (world.rank() == 0) try {
      decide();
    } catch (const std::exception& e) {  // any failure: the other ranks wait in the broadcast
      failure = std::current_exception();
      verdict = std::string(dynamic_cast<const InputError*>(&e) ? "2" : "1") + e.what();
    }
  verdict = world.broadcast(verdict, 0);
  if (verdict.empty()) return;
  if (failure) std::rethrow_exception(failure);
  if (verdict[0] == '2') throw ErrorOfRank0<InputError>(verdict.substr(1));
  throw ErrorOfRank0<Error>(verdict.substr(1));
}

}  // namespace ditbatch
