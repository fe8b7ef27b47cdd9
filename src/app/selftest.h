// `ditbatch selftest` and the check `generate` makes before it trusts a GPU.
#pragma once

#include <string>

#include "core/backend.h"

namespace ditbatch {

// The quick op cases on `be` (the backend generate will use, in its own mode) against the CPU
// backend: empty when every one agrees, else the first disagreement, naming the op, the path
// that ran it and the error. Under 2 s on a GPU; a few ms of CPU work per case.
std::string preflight_failure(Backend& be);

}  // namespace ditbatch
