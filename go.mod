module github.com/reverbgo/reverbgo

go 1.26.8
