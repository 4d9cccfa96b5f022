using System.Net;
using System.Net.Sockets;

namespace PersistentServices.ProcessTests;

/// <summary>
/// A TCP proxy on 127.0.0.1 in front of a service that cuts connections: each chunk it relays is, with probability
/// <see cref="CutProbability"/>, cut short (a random prefix of it is relayed, then both sides are closed), so requests die
/// mid-request (before the service has all of it) and replies mid-reply (after the service executed and answered).
/// </summary>
internal sealed class LoopbackProxy : IAsyncDisposable
{
    private readonly TcpListener _listener = new(IPAddress.Loopback, 0);
    private readonly CancellationTokenSource _stop = new();
    private readonly Random _random;
    private readonly Task _accepting;
    private int _cuts;

    public LoopbackProxy(int upstreamPort, double cutProbability, int seed)
    {
        UpstreamPort = upstreamPort;
        CutProbability = cutProbability;
        _random = new Random(seed);
        _listener.Start();
        _accepting = AcceptAsync();
    }

    public int Port => ((IPEndPoint)_listener.LocalEndpoint).Port;

    public int UpstreamPort { get; }

    public double CutProbability { get; set; }

    public int Cuts => Volatile.Read(ref _cuts);

    private async Task AcceptAsync()
    {
        while (!_stop.IsCancellationRequested)
        {
            TcpClient downstream;
            try
            {
                downstream = await _listener.AcceptTcpClientAsync(_stop.Token);
            }
            catch (Exception) when (_stop.IsCancellationRequested)
            {
                return;
            }

            _ = Task.Run(() => RelayAsync(downstream));
        }
    }

    private async Task RelayAsync(TcpClient downstream)
    {
        using var _ = downstream;
        using var upstream = new TcpClient();
        try
        {
            await upstream.ConnectAsync(IPAddress.Loopback, UpstreamPort, _stop.Token);
        }
        catch (Exception)
        {
            return; // the service is down: the client sees the connection close
        }

        using var cut = CancellationTokenSource.CreateLinkedTokenSource(_stop.Token);
        var toService = PumpAsync(downstream.GetStream(), upstream.GetStream(), cut);
        var toClient = PumpAsync(upstream.GetStream(), downstream.GetStream(), cut);
        await Task.WhenAny(toService, toClient);
        await cut.CancelAsync();
        downstream.Client.Close();
        upstream.Client.Close();
    }

    private async Task PumpAsync(NetworkStream from, NetworkStream to, CancellationTokenSource cut)
    {
        var buffer = new byte[16384];
        try
        {
            while (true)
            {
                var read = await from.ReadAsync(buffer, cut.Token);
                if (read == 0)
                {
                    return;
                }

                int? prefix;
                lock (_random)
                {
                    prefix = _random.NextDouble() < CutProbability ? _random.Next(0, read) : null;
                }

                await to.WriteAsync(buffer.AsMemory(0, prefix ?? read), cut.Token);
                if (prefix is not null)
                {
                    Interlocked.Increment(ref _cuts);
                    return;
                }
            }
        }
        catch (Exception ex) when (ex is IOException or OperationCanceledException or SocketException or ObjectDisposedException)
        {
            // A closed side, or the proxy stopping: the relay ends.
        }
    }

    public async ValueTask DisposeAsync()
    {
        await _stop.CancelAsync();
        _listener.Stop();
        try
        {
            await _accepting;
        }
        catch (OperationCanceledException)
        {
        }

        _stop.Dispose();
    }
}
