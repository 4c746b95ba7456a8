"""Runs every panel query of toolgate.json against a live Prometheus (the one deploy/check.sh
starts, scraping both services after traffic): each must succeed and return series."""

import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

base = sys.argv[1]
dashboard = json.load(open("deploy/dashboards/toolgate.json"))
failed = []
for panel in dashboard["panels"]:
    for target in panel.get("targets", []):
        url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": target["expr"]})
        # Rates need two scrapes of the traffic; give Prometheus up to 10 s.
        for _ in range(20):
            try:
                answer = json.load(urllib.request.urlopen(url, timeout=5))
            except urllib.error.HTTPError as e:  # a query Prometheus rejects
                answer = json.load(e)
            except OSError as e:
                answer = {"status": "error", "error": str(e)}
            if answer["status"] != "success" or answer["data"]["result"]:
                break
            time.sleep(0.5)
        where = f"panel {panel['id']} ({panel['title']}) {target['refId']}: {target['expr']}"
        if answer["status"] != "success":
            failed.append(f"{where}: {answer.get('error')}")
        elif not answer["data"]["result"]:
            failed.append(f"{where}: no series")
        else:
            print(f"   panel {panel['id']:>2} {target['refId']}: {len(answer['data']['result'])} series")
if failed:
    sys.exit("dashboard queries that fail or return nothing:\n  " + "\n  ".join(failed))
print(f"   every panel query of toolgate.json returns series")
