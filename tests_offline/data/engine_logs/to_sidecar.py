"""Turn what record.sh / record_kill.sh saved under /tmp/rec into NAME.log + NAME.docker.json here.

    python3 tests_offline/data/engine_logs/to_sidecar.py NAME...

NAME.docker.json holds the image (tag, ID), Docker's end State (ExitCode, OOMKilled, ...), the container's
Docker events (the recording's own `docker exec` calls left out) and `oom_kill_last_sample`: the cgroup's
oom_kill count at the last once-a-second sample while the container ran (absent where none was taken).
"""
import json
import shutil
import sys
from pathlib import Path

SOURCE, HERE = Path("/tmp/rec"), Path(__file__).resolve().parent

for name in sys.argv[1:]:
    shutil.copyfile(SOURCE / f"{name}.log", HERE / f"{name}.log")
    tag, image_id = (SOURCE / f"{name}.image").read_text().split()
    sidecar = {"image": tag, "image_id": image_id, "state": json.loads((SOURCE / f"{name}.state.json").read_text())}
    events = SOURCE / f"{name}.events"
    if events.exists():
        sidecar["events"] = []
        for line in events.read_text().splitlines():
            time, action, exit_code = line.split(" ", 2)
            if action.startswith("exec_"):
                continue
            sidecar["events"].append({"time": int(time), "action": action, "exit_code": json.loads(json.loads(exit_code))
                                      if exit_code != "null" else None})
    oom_control = SOURCE / f"{name}.oom_control"
    if oom_control.exists():
        sidecar["oom_kill_last_sample"] = int(dict(line.split() for line in oom_control.read_text().splitlines())["oom_kill"])
    (HERE / f"{name}.docker.json").write_text(json.dumps(sidecar, indent=1) + "\n")
