// Files that are never half-written: write to a temporary name in the same directory, fsync,
// rename over the final name, fsync the directory.
#pragma once

#include <string>
#include <vector>

namespace ditbatch {

// "<dir>/.<name>.tmp.<pid>": hidden, in the same directory (rename stays atomic), unique per process.
std::string temp_path_for(const std::string& final_path);
// Temporary files in `dir` that writers which died left behind (kill -9, a node crash):
// "<dir>/.<name>.tmp.<pid>" whose process is gone here and that nothing has written for ten
// minutes (a live writer renames its file within seconds or keeps writing it; the pid test
// alone could hit a live writer on another host of a shared file system). Only those of
// `final_name` when given. Removes them and returns their paths.
std::vector<std::string> remove_orphaned_temp_files(const std::string& dir, const std::string& final_name = "");
// fsync a file and the directory that holds it, then rename tmp -> final atomically.
void commit_file(const std::string& tmp_path, const std::string& final_path);
// Writes bytes atomically to path (temp + fsync + rename).
void write_file_atomic(const std::string& path, const std::string& bytes);
std::string read_file(const std::string& path);  // throws InputError naming the path
bool file_exists(const std::string& path);

}  // namespace ditbatch
