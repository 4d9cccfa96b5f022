using System.Net;
using System.Net.Sockets;

namespace PersistentServices.TestSupport;

/// <summary>
/// Loopback ports for the servers a test starts. One file, linked into every test project that starts servers on ports
/// of its own (ProcessTests, AspNetCore.Tests, Bookstore.Tests).
/// </summary>
internal static class LoopbackPorts
{
    /// <summary>A loopback port free at the moment of the call.</summary>
    public static int Free()
    {
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        return ((IPEndPoint)listener.LocalEndpoint).Port;
    }

    /// <summary>
    /// <paramref name="count"/> distinct loopback ports free at the moment of the call: every listener is held until all are
    /// chosen, so the system cannot hand the same port out twice (as consecutive <see cref="Free()"/> calls may).
    /// </summary>
    public static int[] Free(int count)
    {
        var listeners = Enumerable.Range(0, count).Select(_ => new TcpListener(IPAddress.Loopback, 0)).ToList();
        try
        {
            listeners.ForEach(l => l.Start());
            return [.. listeners.Select(l => ((IPEndPoint)l.LocalEndpoint).Port)];
        }
        finally
        {
            listeners.ForEach(l => l.Stop());
        }
    }
}
