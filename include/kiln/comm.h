/*
 * Kiln collective communication C API: communicators and collectives between ranks.
 *
 * Names and signatures mirror HCCL with `Hccl` renamed to `kiln` (HcclAllReduce ->
 * kilnAllReduce, HcclComm -> kilnComm, HcclCommInitRootInfo -> kilnCommInitRootInfo), and
 * the data type and reduce-op enums keep HCCL's numbering, so code written against CANN
 * ports by renaming; docs/porting.md lists every name. Errors are kilnError codes of
 * kiln.h, with the message in kilnGetRecentErrMsg().
 *
 * A rank is one device of one process. Ranks are made either all in one process
 * (kilnCommInitAll: one rank per device, threads) or one per process (kilnCommInitRootInfo:
 * rank 0 calls kilnCommGetRootInfo and hands the root info to the others, or every process
 * calls kilnCommInitFromEnv under `mpirun` or with KILN_RANK / KILN_WORLD_SIZE /
 * KILN_ROOT_ADDR set). Ranks on one host talk through shared memory, ranks on different
 * hosts through TCP.
 *
 * Every collective is enqueued on a Kiln stream (NULL: the current context's default
 * stream) and returns at once; it runs in stream order, so events order it with compute on
 * other streams, and communication on one stream overlaps computation on another. Buffers
 * are device memory of the communicator's device (kilnrtMalloc) or, for convenience, host
 * memory the caller keeps alive until the stream passes the call.
 *
 * Failures: a peer that exits, is killed or stops answering makes the operation fail on
 * every other rank within KILN_COMM_TIMEOUT seconds (default 30). The stream's task fails
 * (kilnrtSynchronizeStream returns KILN_ERROR_RT_TASK_FAILED) with a message naming the
 * operation and the rank that did not answer, and kilnCommGetAsyncError returns the code.
 * kilnCommAbort makes every pending and later operation of the communicator fail at once.
 */
#ifndef KILN_COMM_H_
#define KILN_COMM_H_

#include <stddef.h>
#include <stdint.h>

#include "kiln/kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes of the communication library (kilnError values, besides kiln.h's). */
#define KILN_ERROR_COMM_TIMEOUT 400001 /* a peer did not answer within KILN_COMM_TIMEOUT */
#define KILN_ERROR_COMM_REMOTE 400002  /* a peer exited or closed its connection */
#define KILN_ERROR_COMM_ABORTED 400003 /* kilnCommAbort was called */
#define KILN_ERROR_COMM_CONNECT 400004 /* bootstrap or connection set-up failed */

typedef void* kilnComm;

/* HCCL_ROOT_INFO_BYTES: an opaque blob rank 0 makes and every rank passes to Init. */
#define KILN_ROOT_INFO_BYTES 4108
typedef struct {
  char internal[KILN_ROOT_INFO_BYTES];
} kilnRootInfo;

/* HcclDataType's numbering. */
typedef enum {
  KILN_COMM_INT8 = 0,
  KILN_COMM_INT16 = 1,
  KILN_COMM_INT32 = 2,
  KILN_COMM_FP16 = 3,
  KILN_COMM_FP32 = 4,
  KILN_COMM_INT64 = 5,
  KILN_COMM_UINT64 = 6,
  KILN_COMM_UINT8 = 7,
  KILN_COMM_UINT16 = 8,
  KILN_COMM_UINT32 = 9,
  KILN_COMM_FP64 = 10,
  KILN_COMM_BF16 = 11
} kilnCommDataType;

/* HcclReduceOp's numbering. */
typedef enum {
  KILN_REDUCE_SUM = 0,
  KILN_REDUCE_PROD = 1,
  KILN_REDUCE_MAX = 2,
  KILN_REDUCE_MIN = 3
} kilnReduceOp;

/* ---- Communicators ------------------------------------------------------------------- */

/* On the process that will be rank 0: starts its bootstrap listener and describes it. */
KILN_API kilnError kilnCommGetRootInfo(kilnRootInfo* rootInfo);
/* Every rank, with the root info rank 0 made; returns when all nRanks have joined (or
 * fails after KILN_COMM_TIMEOUT). Uses the current context's device. */
KILN_API kilnError kilnCommInitRootInfo(uint32_t nRanks, const kilnRootInfo* rootInfo,
                                        uint32_t rank, kilnComm* comm);
/* Kiln extension: rank, size and root address from the launcher's environment: OpenMPI's
 * (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK, under `mpirun`) or KILN_RANK, KILN_WORLD_SIZE and
 * KILN_ROOT_ADDR (host:port rank 0 listens on). */
KILN_API kilnError kilnCommInitFromEnv(kilnComm* comm);
/* One process, one rank per device: comms[i] is rank i on devices[i]. */
KILN_API kilnError kilnCommInitAll(uint32_t nDevices, int32_t* devices, kilnComm* comms);
/* Waits for the communicator's queued operations, then frees it. */
KILN_API kilnError kilnCommDestroy(kilnComm comm);
/* Makes every pending and later operation fail with KILN_ERROR_COMM_ABORTED; never blocks. */
KILN_API kilnError kilnCommAbort(kilnComm comm);
KILN_API kilnError kilnCommGetRankId(kilnComm comm, uint32_t* rank);
KILN_API kilnError kilnCommGetRankSize(kilnComm comm, uint32_t* rankSize);
/* KILN_SUCCESS, or the code of the first operation of the communicator that failed. */
KILN_API kilnError kilnCommGetAsyncError(kilnComm comm, kilnError* asyncError);

/* ---- Collectives (enqueued on `stream`) ---------------------------------------------- */

/* sendBuf == recvBuf is in-place. */
KILN_API kilnError kilnAllReduce(void* sendBuf, void* recvBuf, uint64_t count,
                                 kilnCommDataType dataType, kilnReduceOp op, kilnComm comm,
                                 kilnrtStream stream);
KILN_API kilnError kilnBroadcast(void* buf, uint64_t count, kilnCommDataType dataType,
                                 uint32_t root, kilnComm comm, kilnrtStream stream);
/* recvBuf is used on `root` only. */
KILN_API kilnError kilnReduce(void* sendBuf, void* recvBuf, uint64_t count,
                              kilnCommDataType dataType, kilnReduceOp op, uint32_t root,
                              kilnComm comm, kilnrtStream stream);
/* recvBuf holds rankSize * sendCount elements, rank r's at r * sendCount. */
KILN_API kilnError kilnAllGather(void* sendBuf, void* recvBuf, uint64_t sendCount,
                                 kilnCommDataType dataType, kilnComm comm, kilnrtStream stream);
/* sendBuf holds rankSize * recvCount elements; rank r gets the reduction of block r. */
KILN_API kilnError kilnReduceScatter(void* sendBuf, void* recvBuf, uint64_t recvCount,
                                     kilnCommDataType dataType, kilnReduceOp op, kilnComm comm,
                                     kilnrtStream stream);
/* Block r of sendBuf (sendCount elements) goes to rank r; block r of recvBuf comes from r. */
KILN_API kilnError kilnAlltoAll(const void* sendBuf, uint64_t sendCount,
                                kilnCommDataType sendType, const void* recvBuf,
                                uint64_t recvCount, kilnCommDataType recvType, kilnComm comm,
                                kilnrtStream stream);
/* Counts and displacements (in elements) are uint64_t arrays of rankSize entries. */
KILN_API kilnError kilnAlltoAllV(const void* sendBuf, const void* sendCounts, const void* sdispls,
                                 kilnCommDataType sendType, const void* recvBuf,
                                 const void* recvCounts, const void* rdispls,
                                 kilnCommDataType recvType, kilnComm comm, kilnrtStream stream);
KILN_API kilnError kilnSend(void* sendBuf, uint64_t count, kilnCommDataType dataType,
                            uint32_t destRank, kilnComm comm, kilnrtStream stream);
KILN_API kilnError kilnRecv(void* recvBuf, uint64_t count, kilnCommDataType dataType,
                            uint32_t srcRank, kilnComm comm, kilnrtStream stream);
KILN_API kilnError kilnBarrier(kilnComm comm, kilnrtStream stream);

/* Between kilnGroupStart and kilnGroupEnd the calling thread's operations are collected
 * and launched together at kilnGroupEnd, so one thread may post a Send and the matching
 * Recv (or one operation per communicator of kilnCommInitAll) without deadlock. */
KILN_API kilnError kilnGroupStart(void);
KILN_API kilnError kilnGroupEnd(void);

#ifdef __cplusplus
}
#endif

#endif /* KILN_COMM_H_ */
