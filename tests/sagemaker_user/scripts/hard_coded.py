"""A SageMaker training script written for the container: every path hard-coded under /opt/ml."""

import json
import socket

with open("/opt/ml/input/config/resourceconfig.json") as f:
    current_host = json.load(f)["current_host"]
with open("/opt/ml/model/host.txt", "w") as f:
    f.write(f"{current_host} {socket.gethostname()}")
