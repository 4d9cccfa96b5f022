using Microsoft.AspNetCore.Hosting;
using PersistentServices.Replication;

namespace PersistentServices.AspNetCore.Tests.TestSupport;

/// <summary>A node of a replication group of service "orders" in the test process: a <see cref="TestServer"/> on its own port and log directory.</summary>
internal static class ReplicationTestNode
{
    /// <summary>A loopback port free at the moment of the call.</summary>
    public static int FreePort() => PersistentServices.TestSupport.LoopbackPorts.Free();

    /// <summary>Starts a node of <paramref name="role"/> on <paramref name="port"/> over <paramref name="directory"/>, whose group's other nodes listen on <paramref name="others"/>.</summary>
    public static Task<TestServer> StartAsync(string directory, string peerKey, ReplicationRole role, int port, IEnumerable<int> others, TestBehavior? behavior = null)
        => TestServer.StartAsync(directory, o =>
        {
            o.ServiceName = "orders";
            o.Calls.PeerKey = peerKey;
            o.Replication.Role = role;
            foreach (var other in others)
            {
                o.Replication.Replicas.Add(new Uri($"http://127.0.0.1:{other}/"));
            }
        }, build: b => b.WebHost.UseUrls($"http://127.0.0.1:{port}"), behavior: behavior);
}
