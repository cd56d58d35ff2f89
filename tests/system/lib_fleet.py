"""A simulated GPU fleet for the Ansible tests: N hosts on this one machine.

Each host is a real OpenSSH sshd listening on its own loopback address
(127.0.0.10, 127.0.0.11, ...; 127.0.0.0/8 only), started inside its own mount
and PID namespace (`unshare -m -p --fork --kill-child`) with private bind
mounts over /opt/tfprov, /etc/profile.d, /etc/tfprov, /var/lib/tfprov and
/var/cache/tfprov, so every ssh session (and tfprov, with its production
paths and no --root) sees that host's own files. Stopping a host kills its
namespace's init, and the kernel kills everything left in it.

What stands in, said plainly: these machines have no NVIDIA GPU, so each host
reaches the STAND-IN NVML of build/stubs/driver (libnvidia-ml.so.1, loaded by
dlopen exactly as production loads NVIDIA's) through LD_LIBRARY_PATH, which
the host's sshd sets for its sessions (sshd_config SetEnv) together with the
driver version and GPUs that host reports.

Nginx (Debian's) serves a directory on 127.0.0.1 for the fleet mirror.
"""
import ctypes
import os
import shutil
import socket
import subprocess
import time

# /root too: every host has its own home for root, so a login there does not
# run this machine's root dotfiles (a shell rc that calls `pyenv rehash` made 20
# concurrent sessions queue on pyenv's lock for minutes).
SHARED_MOUNTS = ["/opt/tfprov", "/etc/profile.d", "/etc/tfprov", "/var/lib/tfprov",
                 "/var/cache/tfprov", "/root"]
SSHD = "/usr/sbin/sshd"


def free_port(addrs):
    """A TCP port free on every one of addrs."""
    for _ in range(200):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        ok = True
        for a in addrs:
            t = socket.socket()
            try:
                t.bind((a, port))
            except OSError:
                ok = False
            finally:
                t.close()
            if not ok:
                break
        if ok:
            return port
    raise RuntimeError("no common free port")


def _die_with_parent():
    """In the child before exec: SIGKILL when the test process dies, so a
    killed pytest (a ctest timeout) still takes every host with it."""
    ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL


class Host:
    def __init__(self, fleet, index, driver, cuda, gpus):
        self.fleet = fleet
        self.name = "h%02d" % index
        self.addr = "127.0.0.%d" % (10 + index)
        self.driver, self.cuda, self.gpus = driver, cuda, gpus
        self.dir = os.path.join(fleet.base, "hosts", self.name)
        self.proc = None

    def path(self, p):
        """Where this host's view of p lives on the machine."""
        for m in SHARED_MOUNTS:
            if p == m or p.startswith(m + "/"):
                return os.path.join(self.dir, m.strip("/").replace("/", "_"),
                                    p[len(m):].lstrip("/"))
        raise ValueError("%s is not private to a host" % p)

    def start(self):
        f = self.fleet
        for m in SHARED_MOUNTS:
            os.makedirs(self.path(m), exist_ok=True)
        cfg = os.path.join(self.dir, "sshd_config")
        env = {"LD_LIBRARY_PATH": f.stub_driver_dir, "TFPROV_STUB_DRIVER": self.driver,
               "TFPROV_STUB_CUDA": self.cuda, "TFPROV_STUB_GPUS": self.gpus,
               "TFPROV_WSL_LIB_DIR": "/nonexistent/wsl/lib"}
        setenv = " ".join('"%s=%s"' % kv for kv in env.items())
        with open(cfg, "w") as fh:
            fh.write(f"""ListenAddress {self.addr}:{f.port}
HostKey {f.host_key}
PidFile none
UsePAM no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
AuthorizedKeysFile {f.authorized_keys}
StrictModes no
PrintMotd no
MaxStartups 100:30:200
MaxSessions 50
Subsystem sftp /usr/lib/openssh/sftp-server
SetEnv {setenv}
""")
        mounts = " && ".join("mount --bind %s %s" % (self.path(m), m) for m in SHARED_MOUNTS)
        with open(os.path.join(self.dir, "sshd.log"), "w") as log:
            self.proc = subprocess.Popen(
                ["unshare", "-m", "-p", "--fork", "--kill-child", "--propagation", "private",
                 "sh", "-c", mounts + " && exec %s -D -e -f %s" % (SSHD, cfg)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=_die_with_parent)

    def wait_ready(self, deadline):
        while time.time() < deadline:
            if self.proc.poll() is not None:
                with open(os.path.join(self.dir, "sshd.log")) as f:
                    raise RuntimeError("sshd of %s exited: %s" % (self.name, f.read()))
            try:
                with socket.create_connection((self.addr, self.fleet.port), timeout=1) as s:
                    if s.recv(4).startswith(b"SSH-"):
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("sshd of %s not ready" % self.name)

    def ssh(self, command, timeout=60):
        """Runs command on the host through its sshd as root logs in there:
        (exit status, stdout)."""
        f = self.fleet
        p = subprocess.run(["ssh", "-p", str(f.port), "-i", f.client_key, "-o", "IdentitiesOnly=yes",
                            "-o", "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=no",
                            "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "root@" + self.addr,
                            command], capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout

    def pids(self):
        """Processes of this host: the descendants of its unshare."""
        kids = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open("/proc/%s/stat" % d) as fh:
                        ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
                    kids.setdefault(ppid, []).append(int(d))
                except (OSError, ValueError, IndexError):
                    pass
        out, todo = [], [self.proc.pid]
        while todo:
            for c in kids.get(todo.pop(), []):
                out.append(c)
                todo.append(c)
        return out

    def kill(self):
        """SIGKILL to unshare: its --kill-child gives the namespace's init
        SIGKILL, and the kernel kills every process of the PID namespace and
        drops its mounts. (unshare ignores SIGTERM while it waits.)"""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()

    def stop(self):
        self.kill()
        if self.proc:
            self.proc.wait(timeout=30)


class Fleet:
    """N hosts; drivers maps index -> (driver, cuda), gpus maps index -> NVML spec."""

    def __init__(self, base, n, stub_driver_dir, drivers=None, gpus=None,
                 default_driver=("550.54.14", "12040")):
        self.base = str(base)
        self.stub_driver_dir = stub_driver_dir
        drivers, gpus = drivers or {}, gpus or {}
        self.hosts = [Host(self, i, *(drivers.get(i, default_driver)), gpus.get(i, ""))
                      for i in range(n)]
        self.created = []

    def host(self, name):
        return [h for h in self.hosts if h.name == name][0]

    def start(self):
        os.makedirs(self.base, exist_ok=True)
        self.port = free_port([h.addr for h in self.hosts])
        self.host_key = os.path.join(self.base, "host_ed25519")
        self.client_key = os.path.join(self.base, "client_ed25519")
        for k in (self.host_key, self.client_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", k], check=True)
        self.authorized_keys = os.path.join(self.base, "authorized_keys")
        shutil.copy(self.client_key + ".pub", self.authorized_keys)
        # Mount points (and sshd's privilege separation dir) that the machine
        # lacks are created here and removed by stop().
        for d in SHARED_MOUNTS + ["/run/sshd"]:
            if not os.path.isdir(d):
                os.makedirs(d, mode=0o755)
                self.created.append(d)
        try:
            for h in self.hosts:
                h.start()
            deadline = time.time() + 60
            for h in self.hosts:
                h.wait_ready(deadline)
        except BaseException:
            self.stop()
            raise
        self.write_ansible_files()
        return self

    def write_ansible_files(self):
        self.inventory = os.path.join(self.base, "inventory.ini")
        with open(self.inventory, "w") as f:
            f.write("[fleet]\n")
            for h in self.hosts:
                f.write("%s ansible_host=%s\n" % (h.name, h.addr))
            f.write("\n[fleet:vars]\nansible_port=%d\nansible_user=root\n"
                    "ansible_ssh_private_key_file=%s\n" % (self.port, self.client_key))
        self.cfg = os.path.join(self.base, "ansible.cfg")
        cp = os.path.join(self.base, "cp")
        os.makedirs(cp, exist_ok=True)
        with open(self.cfg, "w") as f:
            f.write(f"""[defaults]
inventory = {self.inventory}
forks = {len(self.hosts)}
host_key_checking = False
retry_files_enabled = False
interpreter_python = /usr/bin/python3
local_tmp = {self.base}/ansible-local
[ssh_connection]
pipelining = True
control_path_dir = {cp}
ssh_args = -o ControlMaster=auto -o ControlPersist=60s -o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no -o IdentitiesOnly=yes -o LogLevel=ERROR
""")

    def stop(self):
        for h in self.hosts:
            h.kill()
        for h in self.hosts:
            h.stop()
        # ssh control masters exit when their server goes; close any left.
        cp = os.path.join(self.base, "cp")
        if os.path.isdir(cp):
            for s in os.listdir(cp):
                subprocess.run(["ssh", "-o", "ControlPath=" + os.path.join(cp, s), "-O", "exit",
                                "x"], capture_output=True, timeout=10)
        deadline = time.time() + 20
        while self.leftovers() and time.time() < deadline:
            time.sleep(0.2)
        for d in reversed(self.created):
            try:
                os.rmdir(d)
            except OSError:
                pass
        self.created = []


    def leftovers(self):
        """Processes still running whose command line names this fleet's directory."""
        out = []
        for d in os.listdir("/proc"):
            if d.isdigit() and int(d) != os.getpid():
                try:
                    with open("/proc/%s/cmdline" % d, "rb") as fh:
                        cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if self.base in cmd:
                    out.append((int(d), cmd[:200]))
        return out


class Nginx:
    """Debian's nginx serving a directory on 127.0.0.1:PORT, with an access log."""

    def __init__(self, base, root):
        self.base, self.root = str(base), str(root)

    def start(self):
        os.makedirs(self.base, exist_ok=True)
        self.port = free_port(["127.0.0.1"])
        self.access_log = os.path.join(self.base, "access.log")
        conf = os.path.join(self.base, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""user root;
worker_processes 1;
pid {self.base}/nginx.pid;
error_log {self.base}/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log {self.access_log};
  client_body_temp_path {self.base}/body;
  proxy_temp_path {self.base}/proxy;
  fastcgi_temp_path {self.base}/fastcgi;
  uwsgi_temp_path {self.base}/uwsgi;
  scgi_temp_path {self.base}/scgi;
  default_type application/octet-stream;
  sendfile on;
  server {{
    listen 127.0.0.1:{self.port};
    root {self.root};
  }}
}}
""")
        self.stderr = os.path.join(self.base, "stderr")
        with open(self.stderr, "w") as err:
            self.proc = subprocess.Popen(["/usr/sbin/nginx", "-c", conf, "-p", self.base,
                                          "-g", "daemon off;"], stdout=subprocess.DEVNULL,
                                         stderr=err)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    with open(self.stderr) as f:
                        raise RuntimeError("nginx: " + f.read())
                time.sleep(0.1)
        raise RuntimeError("nginx did not start")

    def url(self, path=""):
        return "http://127.0.0.1:%d/%s" % (self.port, path.lstrip("/"))

    def gets(self):
        """Paths of the GET requests answered 200, in order."""
        out = []
        with open(self.access_log) as f:
            for line in f:
                parts = line.split('"')
                if len(parts) < 3 or not parts[2].split():
                    continue
                req = parts[1].split()
                if len(req) >= 2 and req[0] == "GET" and parts[2].split()[0] == "200":
                    out.append(req[1])
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
