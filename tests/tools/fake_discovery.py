#!/usr/bin/env python3
"""A stand-in for the discovery part of an API server, enough for
`kubectl apply --dry-run=client --validate=false -f crds/` to map CustomResourceDefinitions
and report what it would create. It stores nothing: every object GET is a 404.

    python3 tests/tools/fake_discovery.py PORT     (0: any free port; the port is printed)"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DOCS = {
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": []},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [{
        "name": "apiextensions.k8s.io",
        "versions": [{"groupVersion": "apiextensions.k8s.io/v1", "version": "v1"}],
        "preferredVersion": {"groupVersion": "apiextensions.k8s.io/v1", "version": "v1"},
    }]},
    "/apis/apiextensions.k8s.io/v1": {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apiextensions.k8s.io/v1",
        "resources": [{"name": "customresourcedefinitions", "singularName": "customresourcedefinition", "namespaced": False,
                       "kind": "CustomResourceDefinition", "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                       "shortNames": ["crd", "crds"]}]},
    "/version": {"major": "1", "minor": "33", "gitVersion": "v1.33.0"},
}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        path = self.path.split("?")[0]
        if path in DOCS:
            body, code = DOCS[path], 200
        else:
            body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
                    "message": f"{path} not found"}
            code = 404
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()
