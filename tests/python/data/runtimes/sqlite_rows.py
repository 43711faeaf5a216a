"""Python + sqlite3: rows inserted in one function grow the C heap in many small steps (brk).
memcost trace must name `insert_rows`, the Python function that inserted them."""
import sqlite3


def insert_rows(connection, count):
    connection.executemany("INSERT INTO t VALUES (?, ?)", ((i, "x" * 200) for i in range(count)))
    connection.commit()


def main():
    connection = sqlite3.connect(":memory:")
    connection.execute("PRAGMA cache_size = -262144")  # 256 MiB
    connection.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, payload TEXT)")
    insert_rows(connection, 400_000)
    print(connection.execute("SELECT count(*) FROM t").fetchone()[0])


main()
