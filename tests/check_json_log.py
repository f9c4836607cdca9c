#!/usr/bin/env python3
"""Checks that every line of a reducerd --log_format=json log is a JSON
object with time, level, event and message, that job, epoch, collective and
ranks have the right types where present, and prints one line per event:
`EVENT job=J epoch=E collective=C ranks=R1,R2` for the test to match.
Exit 1 naming the first bad line."""
import json
import sys


def main(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    if not lines:
        print(f"{path}: no log lines", file=sys.stderr)
        return 1
    for number, line in enumerate(lines, 1):
        try:
            event = json.loads(line)
        except json.JSONDecodeError as e:
            print(f"{path}:{number}: not JSON ({e}): {line}", file=sys.stderr)
            return 1
        checks = [
            isinstance(event, dict),
            isinstance(event.get("time"), str) and event["time"].endswith("Z"),
            event.get("level") in ("INFO", "WARN", "ERROR"),
            isinstance(event.get("event"), str) and event["event"],
            isinstance(event.get("message"), str),
            isinstance(event.get("job", ""), str),
            isinstance(event.get("epoch", 0), int),
            isinstance(event.get("collective", ""), str),
            isinstance(event.get("ranks", []), list)
            and all(isinstance(r, int) for r in event.get("ranks", [])),
        ]
        if not all(checks):
            print(f"{path}:{number}: missing or mistyped fields: {line}",
                  file=sys.stderr)
            return 1
        print(f"{event['event']} job={event.get('job', '')} "
              f"epoch={event.get('epoch', '')} "
              f"collective={event.get('collective', '')} "
              f"ranks={','.join(str(r) for r in event.get('ranks', []))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
