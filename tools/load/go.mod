module github.com/heraldrt/herald/tools/load

go 1.26.0

require (
	github.com/coder/websocket v1.8.15
	github.com/heraldrt/herald v0.0.0
)

require github.com/golang-jwt/jwt/v5 v5.3.1 // indirect

replace github.com/heraldrt/herald => ../..
