"""A proxy between libpq and a PostgreSQL server on Unix sockets that cuts one connection at the worst moment: after
the server answered a statement naming TRIGGER (so the statement ran and committed) and before the answer reaches
the client, as a network that fails there would. Every other byte, and every later connection, passes untouched.

Usage: cut_proxy.py LISTEN_DIR SERVER_DIR TRIGGER   (both directories hold .s.PGSQL.5432); writes LISTEN_DIR/cut when
it has cut."""
import os, selectors, socket, sys, threading

listen_dir, server_dir, trigger = sys.argv[1], sys.argv[2], sys.argv[3].encode()
name = ".s.PGSQL.5432"
done = threading.Event()

def pump(client):
    server = socket.socket(socket.AF_UNIX)
    server.connect(os.path.join(server_dir, name))
    selector = selectors.DefaultSelector()
    selector.register(client, selectors.EVENT_READ, server)
    selector.register(server, selectors.EVENT_READ, client)
    armed = False
    try:
        while True:
            for key, _ in selector.select():
                source, target = key.fileobj, key.data
                data = source.recv(65536)
                if not data:
                    return
                if source is client and not done.is_set() and trigger in data:
                    armed = True
                elif source is server and armed:
                    # The answer (the statement ran): dropped, and the link with it.
                    done.set()
                    open(os.path.join(listen_dir, "cut"), "w").close()
                    return
                target.sendall(data)
    finally:
        client.close()
        server.close()

listener = socket.socket(socket.AF_UNIX)
listener.bind(os.path.join(listen_dir, name))
listener.listen(64)
print("ready", flush=True)
while True:
    connection, _ = listener.accept()
    threading.Thread(target=pump, args=(connection,), daemon=True).start()
