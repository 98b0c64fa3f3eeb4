#!/usr/bin/env bash
# failing-run.sh — record a failing run in policyd's journal with grpcurl, the way an
# operator would by hand, then show its error report (and the post-mortem views when a
# DATABASE_URL is given and psql is installed).
#
#   scripts/failing-run.sh [ADDR [DATABASE_URL]]     ADDR defaults to 127.0.0.1:7433
#
# The run: a chat call to "openai" that gets a 503 (retried), then a 429 with
# retry-after: 2 (retried after 2.2-2.4s), then a 401 (not retryable: the run fails).
# It prints every answer, then the error report's text as the readable block it is
# (grpcurl shows it as an escaped JSON string), and the context id on its last line,
# as "context_id=<uuid>".
set -euo pipefail

addr=${1:-127.0.0.1:7433}
db=${2:-}
here=$(cd "$(dirname "$0")/.." && pwd)
grpcurl=$(command -v grpcurl || true)
[[ -n $grpcurl ]] || grpcurl=$here/.bin/grpcurl
[[ -x $grpcurl ]] || { echo "failing-run.sh: grpcurl not found: run 'make tools'" >&2; exit 2; }

# A client-chosen context id makes the whole script idempotent per id.
id=$(cat /proc/sys/kernel/random/uuid 2>/dev/null || uuidgen 2>/dev/null || python3 -c 'import uuid; print(uuid.uuid4())')

# json_string prints the contents of a JSON string literal (without its quotes)
# decoded, with a final newline: \n, \t, \", \\, \/ and \uXXXX escapes.
json_string() {
	local s=$1 out="" c
	while [[ -n $s ]]; do
		c=${s:0:1}
		if [[ $c != '\' ]]; then
			out+=$c
			s=${s:1}
			continue
		fi
		case ${s:1:1} in
		n) out+=$'\n' ;;
		t) out+=$'\t' ;;
		r) out+=$'\r' ;;
		b | f) ;;
		u)
			out+=$(printf "\\u${s:2:4}")
			s=${s:4}
			;;
		*) out+=${s:1:1} ;; # \" \\ \/
		esac
		s=${s:2}
	done
	printf '%s\n' "$out"
}

call() { # call METHOD JSON
	echo "--- $1" >&2
	"$grpcurl" -plaintext -d "$2" "$addr" "policyd.v1.$1"
}

call JournalService/BeginContext "{\"context_id\":\"$id\",\"agent\":\"demo-agent\",\"provider\":\"openai\",\"model\":\"gpt-4o\",\"operation\":\"chat\",\"profile\":\"default\",\"labels\":{\"run\":\"failing-run.sh\"}}"
call PolicyService/NextDelay "{\"context_id\":\"$id\",\"attempt\":1,\"failure\":{\"provider\":\"openai\",\"model\":\"gpt-4o\",\"operation\":\"chat\",\"http_status\":503,\"body\":\"{\\\"error\\\":{\\\"message\\\":\\\"The server is overloaded\\\",\\\"type\\\":\\\"server_error\\\"}}\"}}"
call PolicyService/NextDelay "{\"context_id\":\"$id\",\"attempt\":2,\"failure\":{\"provider\":\"openai\",\"model\":\"gpt-4o\",\"operation\":\"chat\",\"http_status\":429,\"headers\":{\"retry-after\":\"2\"},\"body\":\"{\\\"error\\\":{\\\"message\\\":\\\"Rate limit reached for requests\\\",\\\"type\\\":\\\"requests\\\",\\\"code\\\":\\\"rate_limit_exceeded\\\"}}\"}}"
call PolicyService/NextDelay "{\"context_id\":\"$id\",\"attempt\":3,\"failure\":{\"provider\":\"openai\",\"model\":\"gpt-4o\",\"operation\":\"chat\",\"http_status\":401,\"body\":\"{\\\"error\\\":{\\\"message\\\":\\\"Incorrect API key provided\\\",\\\"code\\\":\\\"invalid_api_key\\\"}}\"}}"
call JournalService/FinishContext "{\"context_id\":\"$id\",\"outcome\":\"OUTCOME_FAILED\"}" >/dev/null
report=$(call JournalService/GetErrorReport "{\"context_id\":\"$id\"}")
echo "$report"
# The report's text, readable: grpcurl prints it as one JSON string.
echo "--- the error report's text" >&2
json_string "$(sed -n 's/^ *"text": "\(.*\)",\{0,1\}$/\1/p' <<<"$report")"

if [[ -n $db ]] && command -v psql >/dev/null; then
	for view in journal_failed_contexts journal_wait_per_provider journal_failures_per_hour; do
		echo "--- SQL: SELECT * FROM $view" >&2
		psql "$db" -X -P pager=off -c "SELECT * FROM $view WHERE tenant = ''"
	done
fi
echo "context_id=$id"
