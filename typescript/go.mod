// Not Go: this file keeps the Go tool (go test ./..., go vet ./...) out of
// typescript/, whose node_modules can hold Go sources of npm packages.
module github.com/interlockhq/interlock/typescript

go 1.26
