package destinations_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/heldtime"
	"github.com/rivora/rivora/agent/limits"
	"github.com/rivora/rivora/agent/retry"
	"github.com/rivora/rivora/agent/subscriptions"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func TestFromProto(t *testing.T) {
	d, err := destinations.FromProto(&rivorav1.Destination{
		Id: "orders", Url: "https://example.com/hook", Secret: secret,
		Limits: &rivorav1.Limits{
			RatePerSecond: 12.5, Burst: 30, MaxAttempts: 2, MaxInFlight: 4,
			Window: durationpb.New(time.Hour), Timeout: durationpb.New(3 * time.Second),
		},
		PriorityClass:   rivorav1.PriorityClass_PRIORITY_CLASS_HIGH,
		CustomerWeights: map[string]float64{"acme": 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	if d.ID != "orders" || d.URL != "https://example.com/hook" || d.Timeout != 3*time.Second {
		t.Fatalf("FromProto = %+v", d)
	}
	if d.Retry.MaxAttempts != 2 || d.Retry.Window != time.Hour || d.Retry.Base != retry.DefaultBase || d.Retry.Cap != retry.DefaultCap {
		t.Fatalf("retry policy = %+v", d.Retry)
	}
	if d.Limits != (limits.Limits{RatePerSecond: 12.5, Burst: 30, MaxInFlight: 4}) {
		t.Fatalf("limits = %+v", d.Limits)
	}
	if d.Class != limits.High || d.Weights["acme"] != 3 {
		t.Fatalf("class %v weights %v", d.Class, d.Weights)
	}
	// The signer signs with the destination's secret.
	v, _ := webhook.NewVerifier(secret)
	h := http.Header{}
	h.Set(webhook.HeaderID, "e1")
	h.Set(webhook.HeaderTimestamp, "1700000000")
	h.Set(webhook.HeaderSignature, d.Signer.Sign("e1", 1700000000, []byte("body")))
	if err := v.WithClock(func() time.Time { return time.Unix(1700000000, 0) }).Verify(h, []byte("body")); err != nil {
		t.Fatalf("signer does not use the destination's secret: %v", err)
	}
}

func TestFromProtoDefaults(t *testing.T) {
	d, err := destinations.FromProto(&rivorav1.Destination{Id: "orders", Url: "http://x", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	if d.Retry != retry.DefaultPolicy() || d.Timeout != 10*time.Second || d.Class != limits.Normal {
		t.Fatalf("defaults: retry %+v timeout %v class %v", d.Retry, d.Timeout, d.Class)
	}
	for c, want := range map[rivorav1.PriorityClass]limits.Class{
		rivorav1.PriorityClass_PRIORITY_CLASS_HIGH:        limits.High,
		rivorav1.PriorityClass_PRIORITY_CLASS_NORMAL:      limits.Normal,
		rivorav1.PriorityClass_PRIORITY_CLASS_LOW:         limits.Low,
		rivorav1.PriorityClass_PRIORITY_CLASS_UNSPECIFIED: limits.Normal,
	} {
		d, err := destinations.FromProto(&rivorav1.Destination{Id: "x", Secret: secret, PriorityClass: c})
		if err != nil || d.Class != want {
			t.Fatalf("class %v → %v, %v; want %v", c, d.Class, err, want)
		}
		if c != rivorav1.PriorityClass_PRIORITY_CLASS_UNSPECIFIED && destinations.ClassToProto(d.Class) != c {
			t.Fatalf("ClassToProto(%v) = %v, want %v", d.Class, destinations.ClassToProto(d.Class), c)
		}
	}
}

func TestRegistryReplace(t *testing.T) {
	r := destinations.NewRegistry()
	if _, ok := r.Get("orders"); ok {
		t.Fatal("empty registry knows orders")
	}
	r.Replace(time.Now(), []*rivorav1.Destination{{Id: "orders", Url: "http://a", Secret: secret}, {Id: "billing", Url: "http://b", Secret: secret}})
	ep, err := r.Endpoint("billing", nil)
	if err != nil || ep.URL != "http://b" || ep.Signer == nil {
		t.Fatalf("Endpoint(billing) = %+v, %v", ep, err)
	}
	// A replace drops destinations not listed.
	r.Replace(time.Now(), []*rivorav1.Destination{{Id: "orders", Url: "http://c", Secret: secret}})
	if _, ok := r.Get("billing"); ok {
		t.Fatal("billing still registered after a Replace without it")
	}
	if _, err := r.Endpoint("billing", nil); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("Endpoint(unregistered) err = %v", err)
	}
}

func TestRegistryUpdate(t *testing.T) {
	r := destinations.NewRegistry()
	r.Replace(time.Now(), []*rivorav1.Destination{{Id: "a", Url: "http://a", Secret: secret}, {Id: "b", Url: "http://b", Secret: secret}, {Id: "c", Url: "http://c", Secret: secret}})
	changed := r.Update(time.Now(), []*rivorav1.Destination{{Id: "a", Url: "http://a2", Secret: secret}, {Id: "d", Url: "http://d", Secret: secret}}, []string{"b"})
	if len(changed) != 2 || changed[0].ID != "a" || changed[1].ID != "d" {
		t.Fatalf("Update returned %v, want the changed a and d", changed)
	}
	for id, url := range map[string]string{"a": "http://a2", "c": "http://c", "d": "http://d"} {
		if d, ok := r.Get(id); !ok || d.URL != url {
			t.Fatalf("after Update %s = %+v, want url %s", id, d, url)
		}
	}
	if _, ok := r.Get("b"); ok {
		t.Fatal("removed destination b still registered")
	}
}

// One destination whose config does not build (here a secret this agent
// does not parse) is installed unusable and held, with why, its limits
// and its owner; the others of the same set or delta install as usual.
// A later config of it that builds makes it usable again.
func TestRegistryInstallsAnUnusableDestinationAmongGoodOnes(t *testing.T) {
	r := destinations.NewRegistry()
	broken := &rivorav1.Destination{Id: "broken", Url: "http://x", Secret: "nope", OwnerCustomer: "acme", CreatedVersion: 3,
		Limits: &rivorav1.Limits{RatePerSecond: 7, Burst: 9, MaxAttempts: 4, Window: durationpb.New(time.Hour)}}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) // the caller's clock: stretches are exact
	installed := r.Replace(t0, []*rivorav1.Destination{{Id: "orders", Url: "http://a", Secret: secret}, broken})
	if len(installed) != 2 {
		t.Fatalf("Replace installed %d destinations, want both", len(installed))
	}
	if d, ok := r.Get("orders"); !ok || d.Unusable != nil || d.Held() || d.Signer == nil {
		t.Fatalf("orders beside an unusable destination = %+v (registered %v); want usable", d, ok)
	}
	d, ok := r.Get("broken")
	if !ok || d.Unusable == nil || !strings.Contains(d.Unusable.Error(), `destination "broken"`) || !d.Held() || d.Paused {
		t.Fatalf("broken = %+v (registered %v); want registered, unusable with an error naming it, held, its Paused the control plane's (false)", d, ok)
	}
	if strings.Contains(d.Unusable.Error(), "nope") {
		t.Fatalf("unusable destination's error %q shows its secret", d.Unusable)
	}
	if d.Signer != nil || d.OwnerCustomer != "acme" || d.CreatedVersion != 3 || d.Limits.RatePerSecond != 7 || d.Retry.MaxAttempts != 4 || d.Retry.Window != time.Hour {
		t.Fatalf("unusable destination %+v; want no signer, its owner, version, limits and retry policy", d)
	}
	if len(d.UnusableStretches) != 1 || !d.UnusableStretches[0].Start.Equal(t0) || !d.UnusableStretches[0].End.IsZero() {
		t.Fatalf("unusable destination's stretches %v, want one from %v that lasts", d.UnusableStretches, t0)
	}
	// A delta: another destination changes while broken stays unusable
	// (its stretch goes on), then broken's fixed config builds.
	changed := r.Update(t0.Add(time.Minute), []*rivorav1.Destination{{Id: "orders", Url: "http://a2", Secret: secret}, broken}, nil)
	if len(changed) != 2 {
		t.Fatalf("Update changed %d destinations, want 2", len(changed))
	}
	if d, _ := r.Get("orders"); d.URL != "http://a2" || d.Unusable != nil {
		t.Fatalf("orders after an Update beside an unusable destination = %+v", d)
	}
	if again, _ := r.Get("broken"); again.Unusable == nil || len(again.UnusableStretches) != 1 || !again.UnusableStretches[0].Start.Equal(d.UnusableStretches[0].Start) {
		t.Fatalf("broken, still unusable, has stretches %v; want the first one going on", again.UnusableStretches)
	}
	fixed := &rivorav1.Destination{Id: "broken", Url: "http://x", Secret: secret, OwnerCustomer: "acme", CreatedVersion: 3}
	r.Update(t0.Add(time.Hour), []*rivorav1.Destination{fixed}, nil)
	mended, _ := r.Get("broken")
	if mended.Unusable != nil || mended.Held() || mended.Signer == nil {
		t.Fatalf("broken after a config that builds = %+v; want usable, not held", mended)
	}
	if len(mended.UnusableStretches) != 1 || !mended.UnusableStretches[0].End.Equal(t0.Add(time.Hour)) {
		t.Fatalf("mended destination's stretches %v; want the one it was unusable, ended at the mend (%v)", mended.UnusableStretches, t0.Add(time.Hour))
	}
	// The published value readers may hold is not changed.
	if !d.UnusableStretches[0].End.IsZero() {
		t.Fatal("mending changed the stretches of the value published before")
	}
}

// The stretches a previous run of the agent kept (Recall) carry on at
// each destination's first config: one still unusable keeps its open
// stretch (the restart held it too), one mended closes it at the mend,
// and one made again under the same id (another CreatedVersion) starts
// with none. What no destination took is dropped with the first whole
// config.
func TestRegistryCarriesOnTheStretchesAPreviousRunKept(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	restart := t0.Add(5 * time.Hour)
	before := retry.Pauses{{Start: t0, End: t0.Add(time.Hour)}, {Start: t0.Add(2 * time.Hour)}}
	r := destinations.NewRegistry()
	r.Recall(map[string]heldtime.Held{
		"still": {Generation: 3, Stretches: before}, "mended": {Generation: 3, Stretches: before},
		"remade": {Generation: 3, Stretches: before}, "gone": {Generation: 1, Stretches: before},
	})
	r.Replace(restart, []*rivorav1.Destination{
		{Id: "still", Url: "http://x", Secret: "nope", CreatedVersion: 3},
		{Id: "mended", Url: "http://x", Secret: secret, CreatedVersion: 3},
		{Id: "remade", Url: "http://x", Secret: secret, CreatedVersion: 9},
	})
	still, _ := r.Get("still")
	if s := still.UnusableStretches; len(s) != 2 || !s[1].Start.Equal(t0.Add(2*time.Hour)) || !s[1].End.IsZero() {
		t.Fatalf("a destination still unusable after the restart has stretches %v; want %v, the open one going on", s, before)
	}
	mended, _ := r.Get("mended")
	if s := mended.UnusableStretches; len(s) != 2 || !s[1].End.Equal(restart) {
		t.Fatalf("a destination mended at the restart has stretches %v; want the open one ended then (%v)", s, restart)
	}
	// Nothing held since an hour into the outage's first stretch counts
	// against a window but the hour between the two.
	if got := mended.PausedBetween(t0, restart); got != 4*time.Hour {
		t.Fatalf("mended destination paused %v between the first hold and the restart, want 4h", got)
	}
	if remade, _ := r.Get("remade"); len(remade.UnusableStretches) != 0 {
		t.Fatalf("a destination made again under the same id has stretches %v, want none", remade.UnusableStretches)
	}
	// gone was not in the config: a destination made later under its id
	// (at its old version, were that possible) starts with none.
	r.Update(restart.Add(time.Minute), []*rivorav1.Destination{{Id: "gone", Url: "http://x", Secret: "nope", CreatedVersion: 1}}, nil)
	if gone, _ := r.Get("gone"); len(gone.UnusableStretches) != 1 || !gone.UnusableStretches[0].Start.Equal(restart.Add(time.Minute)) {
		t.Fatalf("a destination not in the first config came back with stretches %v; want one of its own", gone.UnusableStretches)
	}
}

// An operator's pause and this agent's hold are apart: a destination
// both paused and unusable is held with Paused the control plane's
// value, and a config of it that builds leaves it paused (held), not
// resumed by the mend.
func TestUnusableKeepsTheOperatorsPause(t *testing.T) {
	r := destinations.NewRegistry()
	r.Replace(time.Now(), []*rivorav1.Destination{{Id: "both", Url: "http://x", Secret: "nope", Paused: true}})
	d, _ := r.Get("both")
	if d.Unusable == nil || !d.Paused || !d.Held() {
		t.Fatalf("paused and unusable = %+v; want unusable, Paused, held", d)
	}
	r.Update(time.Now(), []*rivorav1.Destination{{Id: "both", Url: "http://x", Secret: secret, Paused: true}}, nil)
	d, _ = r.Get("both")
	if d.Unusable != nil || !d.Paused || !d.Held() {
		t.Fatalf("paused, config mended = %+v; want usable, still paused and held", d)
	}
	r.Update(time.Now(), []*rivorav1.Destination{{Id: "both", Url: "http://x", Secret: secret}}, nil)
	if d, _ = r.Get("both"); d.Held() {
		t.Fatalf("resumed and usable = %+v; want not held", d)
	}
}

// A destination that breaks and mends more often than the registry
// keeps stretches for keeps them all covered: the oldest two fold into
// one, so the time since its first break still holds a pending event's
// window (a little more than it was unusable, never less).
func TestUnusableStretchesFoldTheOldest(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	m := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	r := destinations.NewRegistry()
	broken := &rivorav1.Destination{Id: "flaky", Url: "http://x", Secret: "nope"}
	fixed := &rivorav1.Destination{Id: "flaky", Url: "http://x", Secret: secret}
	// Unusable 10i–10i+5 for i in 0..19: 20 stretches, 100 minutes.
	for i := range 20 {
		r.Update(m(10*i), []*rivorav1.Destination{broken}, nil)
		r.Update(m(10*i+5), []*rivorav1.Destination{fixed}, nil)
	}
	d, _ := r.Get("flaky")
	s := d.UnusableStretches
	if len(s) != 16 {
		t.Fatalf("%d stretches kept, want 16", len(s))
	}
	if !s[0].Start.Equal(m(0)) || !s[0].End.Equal(m(45)) {
		t.Fatalf("oldest stretch %v, want the first five folded: 0–45", s[0])
	}
	if last := s[len(s)-1]; !last.Start.Equal(m(190)) || !last.End.Equal(m(195)) {
		t.Fatalf("latest stretch %v, want 190–195 as it was", last)
	}
	if got := d.PausedBetween(m(0), m(200)); got < 100*time.Minute {
		t.Fatalf("PausedBetween over every stretch = %v, want at least the 100 minutes it was unusable", got)
	}
}

// A stretch in which the destination was unusable does not count
// against an event's window, as a pause does; a time both paused and
// unusable counts once.
func TestUnusableStretchHoldsTheWindow(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	m := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	d := &destinations.Destination{
		Pauses:            retry.Pauses{{Start: m(10), End: m(30)}},
		UnusableStretches: retry.Pauses{{Start: m(20), End: m(40)}, {Start: m(50)}},
	}
	// Paused 10–30 and unusable 20–40 make 10–40; unusable from 50 on.
	if got, want := d.PausedBetween(m(0), m(60)), 40*time.Minute; got != want {
		t.Fatalf("PausedBetween = %v, want %v", got, want)
	}
	// A subscription paused 35–55 adds 40–50.
	sub := retry.Pauses{{Start: m(35), End: m(55)}}
	if got, want := d.PausedBetweenWith(sub, m(0), m(60)), 50*time.Minute; got != want {
		t.Fatalf("PausedBetweenWith = %v, want %v", got, want)
	}
}

func TestPausedBetween(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(m int) *timestamppb.Timestamp { return timestamppb.New(t0.Add(time.Duration(m) * time.Minute)) }
	d, err := destinations.FromProto(&rivorav1.Destination{Id: "a", Secret: secret, Paused: true, Pauses: []*rivorav1.PauseInterval{
		{Start: at(10), End: at(20)}, // 10 minutes
		{Start: at(30), End: at(35)}, // 5 minutes
		{Start: at(50)},              // still paused
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Paused {
		t.Fatal("paused flag lost")
	}
	for _, tc := range []struct {
		from, to int
		want     time.Duration
	}{
		{0, 5, 0},
		{0, 25, 10 * time.Minute},
		{15, 32, 7 * time.Minute},      // half of the first, two of the second
		{0, 60, 25 * time.Minute},      // 10 + 5 + 10 of the open pause
		{55, 60, 5 * time.Minute},      // inside the open pause
		{40, 45, 0},                    // between pauses
		{20, 30, 0},                    // touching both ends
		{12, 18, 6 * time.Minute},      // inside one pause
		{0, 10000, 9965 * time.Minute}, // 10 + 5 + the open pause up to "to"
		{100, 90, 0},                   // empty range
	} {
		got := d.PausedBetween(t0.Add(time.Duration(tc.from)*time.Minute), t0.Add(time.Duration(tc.to)*time.Minute))
		if got != tc.want {
			t.Errorf("PausedBetween(%d, %d) = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
}

// After a rotation gave a subscription signed with its destination's
// secret one of its own, the destination's secret signs its deliveries
// too for the grace, so its receiver may switch without refusing any;
// after the grace, only the subscription's.
func TestSubscriptionsFirstOwnSecretOverlapsTheDestinations(t *testing.T) {
	const subSecret = "whsec_c3Vic2NyaXB0aW9uLW93bi1zZWNyZXQtMTIzNA=="
	d, err := destinations.FromProto(&rivorav1.Destination{Id: "erp", Url: "https://example.com/hook", Secret: secret, Limits: &rivorav1.Limits{}})
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour).Truncate(time.Second)
	table := subscriptions.NewTable()
	table.Replace(time.Now(), []*rivorav1.Subscription{{
		Id: "sub_0123456789abcdef", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"},
		Secret: subSecret, DestinationSecretUntil: timestamppb.New(until),
	}})
	sub, _ := table.Get("sub_0123456789abcdef")
	signer := d.Endpoint(sub).Signer
	verifies := func(secret string, at time.Time) bool {
		v, err := webhook.NewVerifier(secret)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		h.Set(webhook.HeaderID, "e1")
		h.Set(webhook.HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
		h.Set(webhook.HeaderSignature, signer.Sign("e1", at.Unix(), []byte("body")))
		return v.WithClock(func() time.Time { return at }).Verify(h, []byte("body")) == nil
	}
	during, after := until.Add(-time.Minute), until.Add(time.Minute)
	if !verifies(subSecret, during) || !verifies(secret, during) {
		t.Errorf("during the grace: verifies with the subscription's secret %v, the destination's %v; want both", verifies(subSecret, during), verifies(secret, during))
	}
	if !verifies(subSecret, after) || verifies(secret, after) {
		t.Errorf("after the grace: verifies with the subscription's secret %v, the destination's %v; want the subscription's only", verifies(subSecret, after), verifies(secret, after))
	}
	// The pair is built once for the subscription as it is, not per
	// delivery; a changed subscription gets its own.
	if again := d.Endpoint(sub).Signer; again != signer {
		t.Error("a second delivery built the signer pair again")
	}
	table.Replace(time.Now(), []*rivorav1.Subscription{{
		Id: "sub_0123456789abcdef", CustomerId: "acme", DestinationId: "erp", Types: []string{"order.*"},
		Secret: subSecret, DestinationSecretUntil: timestamppb.New(until),
	}})
	changed, _ := table.Get("sub_0123456789abcdef")
	if d.Endpoint(changed).Signer == signer {
		t.Error("a changed subscription got the pair built for its previous value")
	}
}

// verifiesAt reports whether signature, signed at at over body "body"
// with id "e1", verifies with key (a whsec_ secret or a whpk_ public
// key).
func verifiesAt(t *testing.T, key, signature string, at time.Time) bool {
	t.Helper()
	v, err := webhook.NewVerifier(key)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set(webhook.HeaderID, "e1")
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
	h.Set(webhook.HeaderSignature, signature)
	return v.WithClock(func() time.Time { return at }).Verify(h, []byte("body")) == nil
}

// A subscription's own secret replaces its destination's v1 (HMAC)
// secret only: on a destination that signs v1a (ed25519), alone or with
// v1, its deliveries carry the destination's v1a signature too (with a
// key rotation's previous key during its grace), so a receiver verifying
// with the destination's public key accepts them, and one verifying with
// the subscription's secret too; the destination's own v1 secret does
// not sign them.
func TestSubscriptionsOwnSecretKeepsTheDestinationsV1a(t *testing.T) {
	const subSecret = "whsec_c3Vic2NyaXB0aW9uLW93bi1zZWNyZXQtMTIzNA=="
	key, public, err := webhook.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	oldKey, oldPublic, err := webhook.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	table := subscriptions.NewTable()
	table.Replace(time.Now(), []*rivorav1.Subscription{{Id: "sub_0123456789abcdef", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"}, Secret: subSecret}})
	sub, _ := table.Get("sub_0123456789abcdef")
	now := time.Now().Truncate(time.Second)
	until := now.Add(time.Hour)
	for _, tc := range []struct {
		scheme, schemes string
		previous        bool
	}{
		{webhook.SchemeV1a, "v1 v1a", false},
		{webhook.SchemeBoth, "v1 v1a", false},
		{webhook.SchemeV1a, "v1 v1a v1a", true},
	} {
		pb := &rivorav1.Destination{Id: "erp", Url: "https://example.com/hook", Secret: secret, SignatureScheme: tc.scheme, SigningKey: key, PublicKey: public, Limits: &rivorav1.Limits{}}
		if tc.previous {
			pb.PreviousSigningKey, pb.PreviousPublicKey, pb.PreviousSigningKeyExpiresAt = oldKey, oldPublic, timestamppb.New(until)
		}
		d, err := destinations.FromProto(pb)
		if err != nil {
			t.Fatal(err)
		}
		signer := d.Endpoint(sub).Signer
		sig := signer.Sign("e1", now.Unix(), []byte("body"))
		var got []string
		for _, entry := range strings.Fields(sig) {
			got = append(got, strings.SplitN(entry, ",", 2)[0])
		}
		if strings.Join(got, " ") != tc.schemes {
			t.Errorf("%s (previous key %v): the subscription's delivery is signed %q, want %q", tc.scheme, tc.previous, got, tc.schemes)
		}
		if !verifiesAt(t, public, sig, now) || !verifiesAt(t, subSecret, sig, now) || verifiesAt(t, secret, sig, now) {
			t.Errorf("%s: verifies with the public key %v, the subscription's secret %v, the destination's secret %v; want the first two only",
				tc.scheme, verifiesAt(t, public, sig, now), verifiesAt(t, subSecret, sig, now), verifiesAt(t, secret, sig, now))
		}
		if tc.previous && !verifiesAt(t, oldPublic, sig, now) {
			t.Errorf("during the key rotation's grace the previous public key does not verify the subscription's delivery")
		}
		if again := d.Endpoint(sub).Signer; again != signer {
			t.Errorf("%s: a second delivery built the subscription's signer again", tc.scheme)
		}
	}
}
