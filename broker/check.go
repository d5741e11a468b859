package broker

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/internal/lazy"
)

// optionalKindFields may be zero in a Kind: everything else is required,
// so a field added to Kind is required of every broker until it is listed
// here with its reason.
var optionalKindFields = map[string]string{
	"Local":        "most brokers have no server the tests try first",
	"ConsumerID":   "a broker that names its objects after any consumer id the loader takes (Redis groups, Kafka groups)",
	"LabelNote":    "only a server that is not the broker itself (kfake) has one",
	"Options":      "a broker without a scenario key",
	"OptionsDoc":   "required with Options (checked below)",
	"Proxy":        "a broker without a protocol proxy: its broker faults skip, its wire history is not judged",
	"Probe":        "checked field by field below",
	"DirOwner":     "a server the runner runs as itself, also as root",
	"Ports":        "a broker whose URLs always give their port",
	"Placeholders": "a broker whose services are told only what every broker tells (${destination}, ${broker.address}, …)",
	"EntryFields":  "a broker whose messages carry the event id and the payload where it says itself (a header, a key)",
	"Pipelined":    "a broker whose proxy answers every request in turn: an error reaches the client before its next request",
}

var (
	kindName = lazy.Regexp(`^[a-z][a-z0-9]*$`)
	envName  = lazy.Regexp(`^RUNNER_[A-Z0-9_]+_URL$`)
)

// Check says everything a Kind lacks: a required field left zero, a probe
// without its parts, a limit that cites no documentation (a URL), a
// mechanism without words, options without their tags. A test runs it on
// every registered kind.
func (k *Kind) Check() error {
	var errs []error
	v := reflect.ValueOf(*k)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if _, ok := optionalKindFields[f.Name]; !ok && v.Field(i).IsZero() {
			errs = append(errs, fmt.Errorf("%s: no %s", k.Name, f.Name))
		}
	}
	errs = append(errs, k.checkWords()...)
	errs = append(errs, k.checkProbe()...)
	errs = append(errs, k.checkLimits()...)
	errs = append(errs, k.checkOptions()...)
	return errors.Join(errs...)
}

func (k *Kind) checkWords() []error {
	var errs []error
	if !kindName().MatchString(k.Name) || !kindName().MatchString(k.Flag) || !kindName().MatchString(k.Dir) {
		errs = append(errs, fmt.Errorf("%s: name %q, flag %q and dir %q must be lower-case words", k.Name, k.Name, k.Flag, k.Dir))
	}
	if !envName().MatchString(k.Env) {
		errs = append(errs, fmt.Errorf("%s: env %q is not RUNNER_…_URL", k.Name, k.Env))
	}
	if strings.Count(k.FlagUsage, "`") != 2 {
		errs = append(errs, fmt.Errorf("%s: FlagUsage %q does not name its argument in backquotes", k.Name, k.FlagUsage))
	}
	if v := k.Verbs; v.Publish == "" || v.Read == "" || v.Ack == "" || v.Claim == "" {
		errs = append(errs, fmt.Errorf("%s: Verbs needs Publish, Read, Ack and Claim", k.Name))
	}
	for _, m := range AllMechanisms {
		if k.Mechanisms[m] == "" {
			errs = append(errs, fmt.Errorf("%s: no words for the mechanism %q", k.Name, m))
		}
	}
	return errs
}

func (k *Kind) checkProbe() []error {
	p := k.Probe
	var errs []error
	if p.Protocol == "" || p.Need <= 0 || p.OK == nil || p.Addrs == nil {
		errs = append(errs, fmt.Errorf("%s: the probe needs Protocol, Need, OK and Addrs", k.Name))
	}
	return errs
}

func (k *Kind) checkLimits() []error {
	var errs []error
	for c, why := range k.Limits {
		if !slices.Contains(AllCapabilities, c) {
			errs = append(errs, fmt.Errorf("%s: a limit of an unknown capability %q", k.Name, c))
		}
		if !strings.Contains(why, "https://") {
			errs = append(errs, fmt.Errorf("%s: why it lacks %s cites no documentation (a URL): %q", k.Name, c, why))
		}
	}
	return errs
}

// checkOptions: every field of the options struct is an option with its
// reference line (param and doc tags); steps decodes them.
func (k *Kind) checkOptions() []error {
	if k.Options == nil {
		if k.OptionsDoc != "" {
			return []error{fmt.Errorf("%s: OptionsDoc without Options", k.Name)}
		}
		return nil
	}
	t := reflect.TypeOf(k.Options)
	if t.Kind() != reflect.Struct || k.OptionsDoc == "" {
		return []error{fmt.Errorf("%s: Options must be a struct value, with OptionsDoc", k.Name)}
	}
	var errs []error
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Tag.Get("param") == "" || f.Tag.Get("doc") == "" {
			errs = append(errs, fmt.Errorf("%s: option %s lacks its param or doc tag", k.Name, f.Name))
		}
	}
	return errs
}
