/* tools/gpu/mpi-stand-in/mpi.h — the few MPI calls nccl-tests' MPI build makes (src/common.cu, src/util.cu), for a
 * GPU machine without an MPI: tools/gpu/nccl-layer.sh builds nccl-tests with MPI=1 against this header and
 * libmpi.so (mpi.cpp), and starts one process per rank itself. They move only nccl-tests' own host data (the NCCL
 * id, host hashes, timings, error counts) through RoCEnante's TCP bootstrap; the collectives under test are NCCL's
 * calls, never these. One communicator: MPI_Comm_split must keep every rank together (nccl-tests' default). */
#ifndef ROCENANTE_MPI_STAND_IN_H
#define ROCENANTE_MPI_STAND_IN_H

#ifdef __cplusplus
extern "C" {
#endif

typedef int MPI_Comm;
typedef int MPI_Datatype;
typedef int MPI_Op;

#define MPI_SUCCESS 0
#define MPI_COMM_WORLD 1
#define MPI_IN_PLACE ((void*)1)
#define MPI_DATATYPE_NULL 0
#define MPI_BYTE 1
#define MPI_CHAR 2
#define MPI_INT 3
#define MPI_LONG 4
#define MPI_LONG_LONG 5
#define MPI_INT64_T 6
#define MPI_UNSIGNED_LONG 7
#define MPI_FLOAT 8
#define MPI_DOUBLE 9
#define MPI_SUM 1
#define MPI_MAX 2
#define MPI_MIN 3

int MPI_Init(int* argc, char*** argv);
int MPI_Finalize(void);
int MPI_Comm_size(MPI_Comm comm, int* size);
int MPI_Comm_rank(MPI_Comm comm, int* rank);
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm);
int MPI_Comm_free(MPI_Comm* comm);
int MPI_Barrier(MPI_Comm comm);
int MPI_Bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm);
int MPI_Allreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm);
int MPI_Allgather(const void* send, int scount, MPI_Datatype stype, void* recv, int rcount, MPI_Datatype rtype, MPI_Comm comm);
int MPI_Gather(const void* send, int scount, MPI_Datatype stype, void* recv, int rcount, MPI_Datatype rtype, int root,
               MPI_Comm comm);
int MPI_Abort(MPI_Comm comm, int code);

#ifdef __cplusplus
}
#endif
#endif
