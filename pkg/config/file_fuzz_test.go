package config

import (
	"strings"
	"testing"
)

// FuzzReadFile: no input makes ReadFile panic or hang, every refusal is a
// *FileError that names a field, and what it accepts writes back (YAML
// and JSON) as a file that reads as the same configuration.
func FuzzReadFile(f *testing.F) {
	for _, s := range []string{
		"", "{}", "[]", "~", fileCluster,
		fileCluster + "            weight: 7\n            quiesced: now\n",
		"executor: {started: true, interface: eth0, nfa: 198.18.0.2, nfa6: 2001:2::2}\nmanager: {started: true, interval: 0.5}\n",
		strings.Replace(fileCluster, "    ports:\n", "    proportions: {active: 30, new: 30, port: 20, system: 20}\n    metrics: [a, b]\n    ports:\n", 1),
		fileCluster + "advisors:\n  - {name: exec, port: 80, program: /bin/true, args: [x], mode: replace}\n",
		"a: &a [1, 2]\nb: *a\n", "clusters: [{address: 2001:2::100, ports: [{port: 53, protocol: udp, method: nat}]}]",
		"metricserver: {source: prometheus, path: /m}\nha: {}\nbgp:\n",
		fileBGP + "      holdtime: 30\n      multihop: 2\n      port: 1179\n      password-file: /etc/dlb/p\n      bfd: true\n",
		fileBGP + "  listen-port: 179\n" + strings.Replace(fileCluster, "    ports:\n", "    announce: true\n    communities: [65000:100, no-export, 1:2:3]\n    med: 7\n    ports:\n", 1),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		file, err := ReadFile([]byte(s), Options{})
		if err != nil {
			fe, ok := err.(*FileError)
			if !ok || fe.Err == nil || fe.Err.Field == "" || fe.Msg == "" {
				t.Fatalf("refusal %T %v: want a *FileError naming a field", err, err)
			}
			return
		}
		for _, write := range []func() ([]byte, error){
			func() ([]byte, error) { return MarshalFile(file.Config) },
			func() ([]byte, error) { return MarshalFileJSON(file.Config) },
		} {
			data, err := write()
			if err != nil {
				t.Fatal(err)
			}
			back, err := ReadFile(data, Options{})
			if err != nil {
				t.Fatalf("an accepted file, written back, is refused: %v\n%s", err, data)
			}
			if !sameConfig(back.Config, file.Config) {
				t.Fatalf("written back, the file reads differently: %+v\n%s", Diff(file.Config, back.Config), data)
			}
		}
	})
}
