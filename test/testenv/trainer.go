package testenv

// ProgressReportScript is a trainer's progress report in Python, as upstream's SDK sends it: urllib
// over Python's ssl module (OpenSSL), trusting only the CA the operator mounts, with the token
// the kubelet projects. It prints "reported: 200" when the endpoint took it.
const ProgressReportScript = `
import json, os, ssl, urllib.request
ctx = ssl.create_default_context(cafile=os.environ["KUBEFLOW_TRAINER_SERVER_CA_CERT"])
token = open(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]).read().strip()
body = {"trainerStatus": {"progressPercentage": 100, "metrics": [{"name": "loss", "value": "0.125"}]}}
req = urllib.request.Request(os.environ["KUBEFLOW_TRAINER_SERVER_URL"], data=json.dumps(body).encode(), method="POST",
                             headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
    print("reported:", resp.status)
`
