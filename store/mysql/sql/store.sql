-- store.version reads the server's version, to check its flavor.
{{define "store.version"}}SELECT VERSION(){{end}}
