"""Print checkov's verdict on template.yaml: every skip with its reason, then any failure.

Reads checkov's JSON report (`checkov -o json`) on stdin; exits 1 when a check
failed, a skip gives no reason or the template did not parse, so
`make template-check` fails with it.
Standard library only: it runs on checkov's own venv.
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    report = json.load(sys.stdin)
    # One framework gives an object, several a list of them.
    reports = report if isinstance(report, list) else [report]
    failed = 0
    for entry in reports:
        results, summary = entry["results"], entry["summary"]
        print(f"checkov {summary['checkov_version']} on {entry['check_type']}: "
              f"{summary['passed']} passed, {summary['failed']} failed, "
              f"{summary['skipped']} skipped, {summary['parsing_errors']} parsing errors")
        skipped = sorted(results.get("skipped_checks", []),
                         key=lambda check: (check["resource"], check["check_id"]))
        for check in skipped:
            reason = check["check_result"].get("suppress_comment")
            if not reason:
                # A skip must say why, beside the resource.
                failed += 1
            print(f"  skipped {check['check_id']} on {check['resource']}: "
                  f"{reason or 'NO REASON GIVEN (a failure)'}")
        for check in results.get("failed_checks", []):
            print(f"  FAILED {check['check_id']} on {check['resource']}: {check['check_name']} "
                  f"(template.yaml lines {check['file_line_range']})")
        failed += summary["failed"] + summary["parsing_errors"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
