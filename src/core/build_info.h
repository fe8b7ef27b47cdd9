// The commit this binary was built from: what every PNG, manifest line and `--version` says
// made it. Defined in a file written at build time (tools/cmake/build_info.cmake).
#pragma once

namespace ditbatch {

// "b464dfe2a1c3", "b464dfe2a1c3+dirty" (tracked files had changes), or "unknown" (no git).
const char* build_commit();

}  // namespace ditbatch
