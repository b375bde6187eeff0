module kerasjob.dev/hack/images/pause

go 1.21
