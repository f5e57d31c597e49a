module github.com/heraldrt/herald/tools/baseline

go 1.26.0

require github.com/coder/websocket v1.8.15
