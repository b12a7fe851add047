#!/usr/bin/env bash
# tests/softroce/rank-env.sh — mpirun wrapper used inside the Soft-RoCE VM: gives each rank its own rxe devices
# (rank r: rxe(r*D) .. rxe(r*D+D-1), D = $SOFTROCE_DEVICES) through ROCENANTE_IB_HCA, then execs the program.
# On real clusters (one rank per node) every rank sets the same ROCENANTE_IB_HCA and needs no wrapper.
#   mpirun -np 2 tests/softroce/rank-env.sh PROGRAM ARGS...
r=${OMPI_COMM_WORLD_RANK:?not started by OpenMPI mpirun}
d=${SOFTROCE_DEVICES:-1}
hca=""
for k in $(seq 0 $((d - 1))); do hca="$hca${hca:+,}rxe$((r * d + k))"; done
export ROCENANTE_IB_HCA=$hca
exec "$@"
