package testsvc

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a local Redis Cluster of three masters on loopback, created with
// redis-cli --cluster create, stopped when the test ends.
type Cluster struct {
	t     testing.TB
	Nodes []*RedisServer
}

// StartCluster starts three cluster-enabled redis-servers (no persistence, noeviction)
// and joins them into one cluster covering every slot.
func StartCluster(t testing.TB) *Cluster { return startCluster(t, 0) }

// StartClusterWithReplicas starts three masters with one replica each.
func StartClusterWithReplicas(t testing.TB) *Cluster { return startCluster(t, 1) }

func startCluster(t testing.TB, replicas int) *Cluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		msg := "redis-cli is not installed; run `make services` (it installs redis-server)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	c := &Cluster{t: t}
	var addrs []string
	for range 3 * (1 + replicas) {
		n := StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", FreePortArg, "--cluster-node-timeout", "2000")
		c.Nodes = append(c.Nodes, n)
		addrs = append(addrs, n.Addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitOK()
	return c
}

// Addrs lists the nodes' host:port.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.Addr())
	}
	return out
}

// Client returns a cluster client, closed when the test ends.
func (c *Cluster) Client() *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true, PoolSize: 32})
	c.t.Cleanup(func() { cc.Close() })
	return cc
}

// Node returns the node listening on addr.
func (c *Cluster) Node(addr string) *RedisServer {
	for _, n := range c.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// ReplicaOf returns the replica of the master at addr (a cluster with replicas).
func (c *Cluster) ReplicaOf(master string) *RedisServer {
	c.t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: master})
	defer cl.Close()
	id, err := cl.Do(context.Background(), "CLUSTER", "MYID").Text()
	if err != nil {
		c.t.Fatalf("CLUSTER MYID: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		nodes, err := cl.ClusterNodes(context.Background()).Result()
		if err == nil {
			for _, line := range strings.Split(nodes, "\n") {
				f := strings.Fields(line)
				if len(f) > 3 && strings.Contains(f[2], "slave") && f[3] == id {
					addr, _, _ := strings.Cut(f[1], "@")
					if n := c.Node(addr); n != nil {
						return n
					}
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("no replica of %s", master)
	return nil
}

// WaitOK waits until every running node reports cluster_state:ok.
func (c *Cluster) WaitOK() {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr()})
		for {
			info, err := cl.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				cl.Close()
				c.t.Fatalf("cluster node %s not ok: %v %s", n.Addr(), err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cl.Close()
	}
}
