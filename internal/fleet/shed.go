package fleet

import (
	"strings"
	"time"
)

// shedNote gathers what the clients' gates reported they did not send at
// once, for the bucket's next shed event: first attempts shed (stopped,
// fallen back, or given up parked), those of them sent to a fallback, and
// first attempts parked at their first check. An event goes out at most
// once a second per bucket, carrying everything since the last one.
type shedNote struct {
	shed, fellBack, parked int64
	at                     time.Time // the last event
}

// noteShed adds u's counts (all of them, whatever the interval: the
// incidents count every call) and emits a shed event when some are pending
// and the last one is a second old.
func (b *Bucket) noteShed(now time.Time, u Usage, emit func(Event)) {
	n := &b.shed
	n.shed += u.Shed
	n.fellBack += u.FellBack
	n.parked += u.ParkedNew
	if n.shed == 0 && n.parked == 0 || now.Sub(n.at) < time.Second {
		return
	}
	emit(Event{At: now, Key: b.key, Kind: EventShed, ClientID: u.ClientID,
		Reason: shedReason(n.shed, n.parked, n.fellBack), Counts: shedCounts(n.shed, n.parked, n.fellBack)})
	*n = shedNote{at: now}
}

// shedCounts are a shed event's counts: shed, parked and fell_back, each
// only when it is not 0 (an event of shed first attempts alone is what it
// was before the gates' parking and fallbacks were counted).
func shedCounts(shed, parked, fellBack int64) map[string]int64 {
	c := make(map[string]int64, 3)
	for _, kv := range [...]struct {
		k string
		n int64
	}{{"shed", shed}, {"parked", parked}, {"fell_back", fellBack}} {
		if kv.n != 0 {
			c[kv.k] = kv.n
		}
	}
	return c
}

// shedReason says what a shed event's counts hold: "clients' gates parked
// first attempts and did not admit others, sending some to a fallback".
func shedReason(shed, parked, fellBack int64) string {
	var did []string
	if parked > 0 {
		did = append(did, "parked first attempts")
	}
	switch {
	case shed > 0 && parked > 0:
		did = append(did, "did not admit others")
	case shed > 0:
		did = append(did, "did not admit first attempts")
	}
	why := "clients' gates " + strings.Join(did, " and ")
	switch {
	case fellBack > 0 && fellBack >= shed:
		why += ", sending them to a fallback"
	case fellBack > 0:
		why += ", sending some to a fallback"
	}
	return why
}
