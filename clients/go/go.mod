module github.com/dlock-pg/dlock-go

go 1.19
