#!/usr/bin/env bash
# Autograde a class as a Slurm array job: task i of N grades shard i/N of the submitted students into
# one PostgreSQL gradebook; the course folder (with its .venv) is on storage every node mounts (NFS).
#
# Once, on the login node, in the course folder (registers the assignment before any shard starts):
#   export ATTNLAB_DB_URL=postgresql+psycopg://grader@db.example.org/attention_kernels   # password in ~/.pgpass
#   .venv/bin/nbgrader generate_assignment attention_kernels --force
# Then (8 shards; change --array and SHARDS together; the log folder must exist):
#   mkdir -p logs && sbatch --array=0-7 --export=ALL,SHARDS=8 deploy/slurm-autograde.sh
# A task that failed (node lost, time limit, scancel) is simply submitted again; it regrades the same
# students, replacing whatever the failed run had written for them:
#   sbatch --array=3 --export=ALL,SHARDS=8 deploy/slurm-autograde.sh
# Arguments after the script's name go to `attnlab autograde`, e.g. one notebook, one worker per task:
#   sbatch --array=0-7 --export=ALL,SHARDS=8 deploy/slurm-autograde.sh --notebook 01_online_softmax --jobs 1
# When every task is done, merge the shards' reports and export the grades:
#   .venv/bin/attnlab report && .venv/bin/attnlab export --to grades.csv
#SBATCH --job-name=attnlab-autograde
#SBATCH --cpus-per-task=2
#SBATCH --mem=16G
#SBATCH --time=04:00:00
#SBATCH --output=logs/autograde-%A_%a.out
# On a GPU partition, add: #SBATCH --gres=gpu:1  (the hidden GPU cases then run)
set -euo pipefail
: "${SLURM_ARRAY_TASK_ID:?submit this script as an array job: sbatch --array=0-7 --export=ALL,SHARDS=8 deploy/slurm-autograde.sh}"
: "${SHARDS:?set SHARDS to the array size, e.g. sbatch --array=0-7 --export=ALL,SHARDS=8}"
: "${ATTNLAB_DB_URL:?set ATTNLAB_DB_URL to the PostgreSQL gradebook (docs/grading.md: a class on a cluster)}"
# Slurm runs a copy of this script from its spool folder, so the script's own path says nothing about
# the course: the course folder is where sbatch was run.
cd "$SLURM_SUBMIT_DIR"
if [ ! -f nbgrader_config.py ] || [ ! -x .venv/bin/attnlab ]; then
    echo "slurm-autograde.sh: $PWD is not a course folder with its .venv (no nbgrader_config.py or" \
         ".venv/bin/attnlab); run sbatch in the course folder" >&2
    exit 2
fi
export PATH="$PWD/.venv/bin:$PATH"
exec attnlab autograde --shard "${SLURM_ARRAY_TASK_ID}/${SHARDS}" "$@"
