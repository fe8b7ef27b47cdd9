// Where ditbatch's own data files are: beside an installed binary (PREFIX/bin/ditbatch reads
// PREFIX/share/ditbatch/..., wherever the prefix was moved), else in the source tree it was
// built from (a build folder's binary).
#pragma once

#include <string>

namespace ditbatch {

// The running executable's path ("" if the system does not say).
std::string executable_path();
// PREFIX/share/ditbatch/<installed> when the binary runs from an installed prefix that has it,
// else <source tree>/<in_source>.
std::string data_path(const std::string& installed, const std::string& in_source);

}  // namespace ditbatch
