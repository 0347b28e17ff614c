package binlog

import (
	"strings"
	"testing"
)

func TestPrivilegesReadMariaDBAndMySQLWording(t *testing.T) {
	for _, c := range []struct {
		name    string
		grants  []string
		missing []string // words of each missing requirement, in order
	}{
		{"MariaDB 10.5+ replica user", []string{
			"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `relay`@`%` IDENTIFIED BY PASSWORD '*ABC'",
		}, nil},
		{"MySQL 8 replica user", []string{
			"GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `relay`@`%`",
			"GRANT BACKUP_ADMIN ON *.* TO `relay`@`%`",
		}, nil},
		{"all privileges", []string{"GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION"}, nil},
		{"grants on a database only", []string{
			"GRANT USAGE ON *.* TO `app`@`%`",
			"GRANT ALL PRIVILEGES ON `app`.* TO `app`@`%`",
		}, []string{"REPLICATION SLAVE", "REPLICATION CLIENT"}},
		{"slave without client", []string{"GRANT REPLICATION SLAVE ON *.* TO `relay`@`%`"}, []string{"REPLICATION CLIENT"}},
		{"a role, not read", []string{"GRANT `replicator`@`%` TO `relay`@`%`"}, []string{"REPLICATION SLAVE", "REPLICATION CLIENT"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := privileges{user: "relay@%", set: map[string]bool{}}
			for _, g := range c.grants {
				p.add(g)
			}
			got := p.missing()
			if len(got) != len(c.missing) {
				t.Fatalf("missing %q, want %d requirements naming %q", got, len(c.missing), c.missing)
			}
			for i, want := range c.missing {
				if !strings.Contains(got[i], "GRANT "+want+" ON *.* TO 'relay'@'%'") {
					t.Errorf("requirement %d is %q, want the GRANT of %s", i+1, got[i], want)
				}
			}
		})
	}
}
