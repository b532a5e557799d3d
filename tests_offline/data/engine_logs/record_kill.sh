#!/bin/bash
# record_kill.sh NAME LOG_LINE PROCESS_TITLE: boot qwen3-moe, wait for LOG_LINE, SIGKILL the process titled
# PROCESS_TITLE (VLLM::Worker, VLLM::EngineCore) from inside the container, record what follows.
name=$1; until_line=$2; victim=$3
img=$(docker images --format '{{.Repository}}:{{.Tag}}' | grep '^onegpu-real-engine:' | head -1)
cid=$(docker create --network none --label onegpu.test=1 --shm-size 1g -e VLLM_CPU_KVCACHE_SPACE=1 -v /tmp/tiny/qwen3-moe:/model:ro "$img" serve /model --uds /tmp/x.sock --max-model-len 512) || exit 1
trap 'docker rm -f $cid >/dev/null 2>&1' EXIT
docker events --filter container=$cid --format "{{.Time}} {{.Action}} {{json .Actor.Attributes.exitCode}}" > /tmp/rec/$name.events & evpid=$!
docker start $cid >/dev/null; t0=$(date +%s)
until docker logs $cid 2>&1 | grep -q "$until_line"; do
  [ $(( $(date +%s) - t0 )) -ge 500 ] && { echo TIMEOUT; exit 1; }; sleep 2; done
sleep 2
wpid=$(docker exec $cid sh -c 'for p in /proc/[0-9]*; do tr "\0" " " < $p/cmdline 2>/dev/null | grep -q "^$0" && basename $p; done' $victim | head -1)
echo "$victim pid $wpid"; docker exec $cid sh -c 'for p in /proc/[0-9]*; do echo "$(basename $p) $(tr "\0" " " < $p/cmdline | cut -c1-60)"; done'
docker exec $cid sh -c "kill -9 $wpid"
for i in $(seq 60); do [ "$(docker inspect -f '{{.State.Status}}' $cid)" = exited ] && break; sleep 1; done
[ "$(docker inspect -f '{{.State.Status}}' $cid)" = exited ] || { echo "still running after 60 s"; docker stop -t 30 $cid >/dev/null; }
docker logs $cid > /tmp/rec/$name.log 2>&1
docker inspect -f '{{json .State}}' $cid > /tmp/rec/$name.state.json
sleep 1; kill $evpid
echo "$img $(docker image inspect -f {{.Id}} $img)" > /tmp/rec/$name.image
cat /tmp/rec/$name.state.json
