#!/bin/bash
# record.sh NAME TIMEOUT_S [docker create args...] -- [serve args...]
# creates a labelled, network-less container of the newest onegpu-real-engine:<hash> image, starts it, waits
# for exit or for startup (then stops it, SIGTERM), and saves under /tmp/rec: NAME.log (`docker logs`, both
# streams in the order they came), NAME.state.json (`docker inspect` State), NAME.events (`docker events`:
# start, oom, die with its exit code), NAME.oom_control (the cgroup v1 memory.oom_control, sampled once a
# second while it ran), NAME.image (tag and ID); then removes the container.
name=$1; limit=$2; shift 2
dargs=(); while [ "$1" != "--" ]; do dargs+=("$1"); shift; done; shift
img=$(docker images --format '{{.Repository}}:{{.Tag}}' | grep '^onegpu-real-engine:' | head -1)
cid=$(docker create --network none --label onegpu.test=1 "${dargs[@]}" "$img" "$@") || exit 1
trap 'docker rm -f $cid >/dev/null 2>&1' EXIT
echo "image $img container $cid"
docker events --filter container=$cid --format "{{.Time}} {{.Action}} {{json .Actor.Attributes.exitCode}}" > /tmp/rec/$name.events & evpid=$!
docker start $cid >/dev/null
t0=$(date +%s)
while :; do
  st=$(docker inspect -f '{{.State.Status}}' $cid)
  [ "$st" = exited ] || [ "$st" = dead ] && break
  if docker logs $cid 2>&1 | grep -q "Application startup complete"; then sleep 2; docker stop -t 30 $cid >/dev/null; break; fi
  [ $(( $(date +%s) - t0 )) -ge $limit ] && { echo TIMEOUT; docker stop -t 10 $cid >/dev/null; break; }
  cat /sys/fs/cgroup/memory/docker/$cid/memory.oom_control > /tmp/rec/$name.oom_control 2>/dev/null
  sleep 1
done
docker wait $cid >/dev/null
docker logs $cid > /tmp/rec/$name.log 2>&1
docker inspect -f '{{json .State}}' $cid > /tmp/rec/$name.state.json
sleep 1; kill $evpid
echo "$img $(docker image inspect -f {{.Id}} $img)" > /tmp/rec/$name.image
echo "elapsed $(( $(date +%s) - t0 )) s"; cat /tmp/rec/$name.state.json; echo
