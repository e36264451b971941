package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestVersion(t *testing.T) {
	if got := Version("v1.2.3"); got != "v1.2.3" {
		t.Errorf("Version(v1.2.3) = %q; the ldflags value must win", got)
	}
	if got := Version(""); got == "" {
		t.Error(`Version("") is empty`)
	}
}

func TestFromBuildInfo(t *testing.T) {
	const rev = "0123456789abcdef0123"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	for _, tc := range []struct {
		name     string
		version  string
		settings []debug.BuildSetting
		want     string
	}{
		{"module version", "v1.4.0", vcs("false"), "v1.4.0"},
		{"devel with revision", "(devel)", vcs("false"), "devel-0123456789ab"},
		{"devel dirty", "(devel)", vcs("true"), "devel-0123456789ab+dirty"},
		{"empty version with revision", "", vcs("false"), "devel-0123456789ab"},
		{"devel without vcs", "(devel)", nil, "(devel)"},
		{"nothing recorded", "", nil, "(devel)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bi := &debug.BuildInfo{Main: debug.Module{Version: tc.version}, Settings: tc.settings}
			if got := fromBuildInfo(bi); got != tc.want {
				t.Errorf("fromBuildInfo = %q; want %q", got, tc.want)
			}
		})
	}
}
