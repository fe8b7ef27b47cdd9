// The process world: MPI when ditbatch is built with it (one rank per GPU, launched by mpirun
// or srun), a single process otherwise. Node-local ranks come from OMPI_COMM_WORLD_LOCAL_RANK
// when mpirun sets it, cross-checked against MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), which
// is right under every launcher (SLURM_LOCALID is 0 on every rank under mpirun in a job).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ditbatch {

class World {
 public:
  // Initialises MPI (if built with it) and finds the node-local rank; throws on a mismatch.
  World(int* argc, char*** argv);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // rank among the processes of this node
  int local_size() const { return local_size_; }
  int node_count() const { return node_count_; }
  const std::string& host() const { return host_; }
  bool is_mpi() const { return mpi_; }
  // How the local rank was found, for the log: "OMPI_COMM_WORLD_LOCAL_RANK=1, split_type=1".
  const std::string& local_rank_source() const { return local_rank_source_; }

  void barrier() const;
  // Ends every rank of the job now, with this status (a fatal error on one rank).
  [[noreturn]] void abort(int status) const;

  // Collectives over all ranks.
  std::string broadcast(const std::string& bytes, int root) const;
  int64_t sum(int64_t value) const;
  int64_t max(int64_t value) const;
  std::vector<std::string> gather(const std::string& bytes, int root) const;  // root gets size() items
  // The same over the ranks of this node (root = local rank 0): weights read once per node.
  std::string node_broadcast(const std::string& bytes) const;
  std::vector<std::string> node_allgather(const std::string& bytes) const;  // one item per local rank
  void node_broadcast_inplace(void* data, size_t bytes) const;

  // A shared counter at rank 0 (MPI_Fetch_and_op): returns the value before adding `add`.
  class Counter {
   public:
    virtual ~Counter() = default;
    virtual int64_t fetch_add(int64_t add) = 0;
  };
  std::unique_ptr<Counter> make_counter() const;  // collective

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, node_count_ = 1;
  bool mpi_ = false;
  std::string host_, local_rank_source_;
  struct Comms;
  std::unique_ptr<Comms> comms_;
};

}  // namespace ditbatch
