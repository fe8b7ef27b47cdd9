#include "cluster/world.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/error.h"

#ifdef DITBATCH_HAVE_MPI
#include <mpi.h>
#endif

namespace ditbatch {

namespace {
std::string host_name() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}
}  // namespace

#ifdef DITBATCH_HAVE_MPI

struct World::Comms {
  MPI_Comm node = MPI_COMM_NULL;
};

namespace {
void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fail("MPI {} failed: {}", what, std::string(msg, static_cast<size_t>(len)));
  }
}
// MPI counts are int: move big buffers in pieces.
constexpr size_t kChunk = size_t{1} << 30;
}  // namespace

World::World(int* argc, char*** argv) : host_(host_name()), comms_(std::make_unique<Comms>()) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "init");
  }
  mpi_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &comms_->node),
            "comm_split_type");
  MPI_Comm_rank(comms_->node, &local_rank_);
  MPI_Comm_size(comms_->node, &local_size_);
  node_count_ = static_cast<int>(sum(local_rank_ == 0 ? 1 : 0));
  local_rank_source_ = fmt::format("MPI_Comm_split_type rank {}/{}", local_rank_, local_size_);
  if (const char* env = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) {
    local_rank_source_ += fmt::format(", OMPI_COMM_WORLD_LOCAL_RANK={}", env);
    if (std::atoi(env) != local_rank_)
      fail("rank {} on {}: OMPI_COMM_WORLD_LOCAL_RANK={} but MPI_Comm_split_type gives local rank {}: the launcher "
           "and MPI disagree about which processes share this node",
           rank_, host_, env, local_rank_);
  }
}

World::~World() {
  if (comms_->node != MPI_COMM_NULL) MPI_Comm_free(&comms_->node);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void World::barrier() const { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "barrier"); }

void World::abort(int status) const {
  MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);
}

namespace {
std::string bcast_bytes(const std::string& bytes, int root, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  uint64_t n = bytes.size();
  check_mpi(MPI_Bcast(&n, 1, MPI_UINT64_T, root, comm), "bcast");
  std::string out = rank == root ? bytes : std::string(n, '\0');
  for (size_t off = 0; off < n; off += kChunk)
    check_mpi(MPI_Bcast(out.data() + off, static_cast<int>(std::min(kChunk, n - off)), MPI_BYTE, root, comm), "bcast");
  return out;
}
}  // namespace

std::string World::broadcast(const std::string& bytes, int root) const { return bcast_bytes(bytes, root, MPI_COMM_WORLD); }

std::string World::node_broadcast(const std::string& bytes) const { return bcast_bytes(bytes, 0, comms_->node); }

void World::node_broadcast_inplace(void* data, size_t bytes) const {
  for (size_t off = 0; off < bytes; off += kChunk)
    check_mpi(MPI_Bcast(static_cast<char*>(data) + off, static_cast<int>(std::min(kChunk, bytes - off)), MPI_BYTE, 0,
                        comms_->node),
              "node bcast");
}

std::vector<std::string> World::node_allgather(const std::string& bytes) const {
  int n = static_cast<int>(bytes.size());
  std::vector<int> sizes(static_cast<size_t>(local_size_)), offsets(static_cast<size_t>(local_size_));
  check_mpi(MPI_Allgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, comms_->node), "node allgather");
  int total = 0;
  for (int r = 0; r < local_size_; ++r) offsets[static_cast<size_t>(r)] = total, total += sizes[static_cast<size_t>(r)];
  std::string all(static_cast<size_t>(total), '\0');
  check_mpi(MPI_Allgatherv(bytes.data(), n, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE, comms_->node),
            "node allgatherv");
  std::vector<std::string> out;
  for (int r = 0; r < local_size_; ++r)
    out.push_back(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]), static_cast<size_t>(sizes[static_cast<size_t>(r)])));
  return out;
}

int64_t World::sum(int64_t value) const {
  int64_t out = 0;
  check_mpi(MPI_Allreduce(&value, &out, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD), "allreduce");
  return out;
}

int64_t World::max(int64_t value) const {
  int64_t out = 0;
  check_mpi(MPI_Allreduce(&value, &out, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD), "allreduce");
  return out;
}

std::vector<std::string> World::gather(const std::string& bytes, int root) const {
  int n = static_cast<int>(bytes.size());
  std::vector<int> sizes(static_cast<size_t>(size_)), offsets(static_cast<size_t>(size_));
  check_mpi(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, MPI_COMM_WORLD), "gather");
  std::string all;
  if (rank_ == root) {
    int total = 0;
    for (int r = 0; r < size_; ++r) offsets[static_cast<size_t>(r)] = total, total += sizes[static_cast<size_t>(r)];
    all.resize(static_cast<size_t>(total));
  }
  check_mpi(MPI_Gatherv(bytes.data(), n, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE, root,
                        MPI_COMM_WORLD),
            "gatherv");
  std::vector<std::string> out;
  if (rank_ == root)
    for (int r = 0; r < size_; ++r)
      out.push_back(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
                               static_cast<size_t>(sizes[static_cast<size_t>(r)])));
  return out;
}

namespace {
class MpiCounter final : public World::Counter {
 public:
  MpiCounter() {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    check_mpi(MPI_Win_allocate(rank == 0 ? sizeof(int64_t) : 0, sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &base_,
                               &win_),
              "win_allocate");
    if (rank == 0) {
      MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win_);
      *base_ = 0;
      MPI_Win_unlock(0, win_);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ~MpiCounter() override { MPI_Win_free(&win_); }
  int64_t fetch_add(int64_t add) override {
    int64_t before = 0;
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win_);
    MPI_Fetch_and_op(&add, &before, MPI_INT64_T, 0, 0, MPI_SUM, win_);
    MPI_Win_unlock(0, win_);
    return before;
  }

 private:
  int64_t* base_ = nullptr;
  MPI_Win win_ = MPI_WIN_NULL;
};
}  // namespace

std::unique_ptr<World::Counter> World::make_counter() const { return std::make_unique<MpiCounter>(); }

#else  // a single process

struct World::Comms {};

World::World(int*, char***) : host_(host_name()), comms_(std::make_unique<Comms>()) {
  local_rank_source_ = "single process (built without MPI)";
}
World::~World() = default;
void World::barrier() const {}
void World::abort(int status) const { std::_Exit(status); }
std::string World::broadcast(const std::string& bytes, int) const { return bytes; }
std::string World::node_broadcast(const std::string& bytes) const { return bytes; }
std::vector<std::string> World::node_allgather(const std::string& bytes) const { return {bytes}; }
void World::node_broadcast_inplace(void*, size_t) const {}
int64_t World::sum(int64_t value) const { return value; }
int64_t World::max(int64_t value) const { return value; }
std::vector<std::string> World::gather(const std::string& bytes, int) const { return {bytes}; }

namespace {
class LocalCounter final : public World::Counter {
 public:
  int64_t fetch_add(int64_t add) override {
    int64_t before = value_;
    value_ += add;
    return before;
  }

 private:
  int64_t value_ = 0;
};
}  // namespace

std::unique_ptr<World::Counter> World::make_counter() const { return std::make_unique<LocalCounter>(); }

#endif

}  // namespace ditbatch
