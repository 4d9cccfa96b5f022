using System.Globalization;
using System.Net.Http.Headers;
using System.Text;
using PersistentServices.Calls;

namespace PersistentServices.Tool;

/// <summary>
/// <c>psctl replication status|promote|switchover</c>: an operator's view of a replicated service's node, the promotion
/// of a replica to the primary of a newer term (docs/replication.md, "Failover"), and the planned handover of a primary's
/// role to a caught-up replica ("Switchover"). Promotions and switchovers are signed with the service's peer key, as the
/// nodes sign their shipments: only whoever holds that key promotes.
/// </summary>
internal static class ReplicationCommand
{
    public const string Usage = """
          psctl replication status <node-url> --service <ServiceName>
          psctl replication promote <node-url> --service <ServiceName> --term <T>
          psctl replication switchover <primary-url> --service <ServiceName> [--to <replica-url>]

        status   the node's role, term, and what it holds (a replica: its log's begin and durable end) or ships (a
                 primary: its durable end, what its replicas hold, each shipper's state and lag in bytes), as JSON.
                 Signed with the peer key like the others: a node answers its status only to the group's own nodes
                 and operators (401 otherwise).
        promote  makes a replica the primary of term T, which must be newer than every term it has seen (status shows
                 its term: give one more). Promote a replica only once the old primary is gone or fenced; in synchronous
                 mode every replica holds everything acknowledged. The old primary, when it comes back, is fenced by the
                 new term and rejoins as a replica.
        switchover  hands the primary's role to a replica (--to, else the one that holds the most), for an upgrade:
                 the primary refuses new requests (503 replica: gateways and clients go on to the other nodes), lets
                 the running ones finish, waits until the replica holds its whole log (Replication.SwitchoverTimeout,
                 5 s by default), and has it promoted to the next term; it is then fenced and rejoins as a replica
                 when restarted. If the replica does not catch up in time, nothing changes and the primary serves again.
                 psctl reads the primary's term from its status first: the switchover names that term and the node.
        Each message names the node it is sent to (give its base address as the group knows it: Replication.Address,
        or as the other nodes list it) and the term it is for, and a node takes each signed message once.
        The peer key (PersistentServicesOptions.Calls.PeerKey) is read from PSCTL_PEER_KEY, or --peer-key-file.

        Exit status: 0 done; 1 refused (the node answered why); 2 the node could not be asked (usage, unreachable).
        """;

    public static int Run(string[] args, TextWriter output, TextWriter error, Func<string, string?> environment)
    {
        if (args is [] or ["-h" or "--help" or "help", ..])
        {
            output.WriteLine(Usage);
            return args.Length == 0 ? Cli.CannotCheck : Cli.Clean;
        }

        if (args.Length < 2 || !Uri.TryCreate(args[1], UriKind.Absolute, out var node) || node.Scheme is not ("http" or "https"))
        {
            error.WriteLine("psctl replication: give the command and the node's base address (http://host:port).");
            error.WriteLine(Usage);
            return Cli.CannotCheck;
        }

        string? service = null, keyFile = null;
        Uri? to = null;
        long term = 0;
        for (var i = 2; i < args.Length; i++)
        {
            switch (args[i])
            {
                case "--service" when i + 1 < args.Length:
                    service = args[++i];
                    break;
                case "--term" when i + 1 < args.Length && long.TryParse(args[i + 1], NumberStyles.None, CultureInfo.InvariantCulture, out var t) && t >= 1:
                    term = t;
                    i++;
                    break;
                case "--to" when i + 1 < args.Length && Uri.TryCreate(args[i + 1], UriKind.Absolute, out var target) && target.Scheme is "http" or "https":
                    to = target;
                    i++;
                    break;
                case "--peer-key-file" when i + 1 < args.Length:
                    keyFile = args[++i];
                    break;
                default:
                    error.WriteLine($"psctl replication: unknown or incomplete option '{args[i]}'.");
                    error.WriteLine(Usage);
                    return Cli.CannotCheck;
            }
        }

        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(30) };
        var peerKey = keyFile is not null ? File.ReadAllText(keyFile).Trim() : environment("PSCTL_PEER_KEY");
        try
        {
            switch (args[0])
            {
                case "status":
                    if (service is null || string.IsNullOrEmpty(peerKey))
                    {
                        error.WriteLine("psctl replication status: give --service <ServiceName> and the service's peer key (PSCTL_PEER_KEY=<key>, or --peer-key-file <file>): " +
                                        "a node shows its status only to requests signed with it.");
                        return Cli.CannotCheck;
                    }

                    using (var request = Status(node, service, peerKey))
                    {
                        return Print(http.SendAsync(request).GetAwaiter().GetResult(), output, error);
                    }

                case "promote" or "switchover":
                    if (service is null || (args[0] == "promote" ? term == 0 : term != 0) || (args[0] == "promote" && to is not null))
                    {
                        error.WriteLine(args[0] == "promote"
                            ? "psctl replication promote: give --service <ServiceName> and --term <T>."
                            : "psctl replication switchover: give --service <ServiceName>, and --to <replica-url> or nothing for the replica that holds the most.");
                        return Cli.CannotCheck;
                    }

                    if (string.IsNullOrEmpty(peerKey))
                    {
                        error.WriteLine($"psctl replication {args[0]}: the service's peer key is needed: PSCTL_PEER_KEY=<key>, or --peer-key-file <file>.");
                        return Cli.CannotCheck;
                    }

                    if (args[0] == "switchover")
                    {
                        // The switchover names the primary's term: read it from the node first.
                        using var ask = Status(node, service, peerKey);
                        using var answer = http.SendAsync(ask).GetAwaiter().GetResult();
                        if (!answer.IsSuccessStatusCode)
                        {
                            return Print(answer, output, error);
                        }

                        using var status = System.Text.Json.JsonDocument.Parse(answer.Content.ReadAsStringAsync().GetAwaiter().GetResult());
                        term = status.RootElement.GetProperty("term").GetInt64();
                    }

                    using (var request = args[0] == "promote" ? Promotion(node, service, term, peerKey) : Switchover(node, service, term, to, peerKey))
                    {
                        return Print(http.SendAsync(request).GetAwaiter().GetResult(), output, error);
                    }

                default:
                    error.WriteLine($"psctl replication: unknown command '{args[0]}'.");
                    error.WriteLine(Usage);
                    return Cli.CannotCheck;
            }
        }
        catch (Exception ex) when (ex is HttpRequestException or TaskCanceledException or IOException)
        {
            error.WriteLine($"psctl replication: {node} could not be asked: {ex.Message}");
            return Cli.CannotCheck;
        }
    }

    /// <summary>A promotion of the node at <paramref name="node"/> to <paramref name="term"/>, signed as the nodes sign replication messages (PS-Signature v2, role "replication"), naming the node.</summary>
    internal static HttpRequestMessage Promotion(Uri node, string service, long term, string peerKey)
        => Signed(HttpMethod.Post, new Uri(node, "/ps/replication/promote"), service, string.Create(CultureInfo.InvariantCulture, $"term={term};node={node}"), peerKey);

    /// <summary>
    /// A switchover of the primary at <paramref name="primary"/>, in <paramref name="term"/>, to <paramref name="to"/> (null: the
    /// replica that holds the most), signed the same way, naming the primary and its term.
    /// </summary>
    internal static HttpRequestMessage Switchover(Uri primary, string service, long term, Uri? to, string peerKey)
        => Signed(HttpMethod.Post, new Uri(primary, "/ps/replication/switchover"), service,
            string.Create(CultureInfo.InvariantCulture, $"term={term};node={primary};to={to}"), peerKey);

    /// <summary>A status request (<c>GET</c>, <c>PS-Replication: status</c>), signed the same way.</summary>
    internal static HttpRequestMessage Status(Uri node, string service, string peerKey)
        => Signed(HttpMethod.Get, new Uri(node, "/ps/replication/status"), service, "status", peerKey);

    /// <summary>A replication message with no body and <paramref name="header"/> as its PS-Replication header, signed with the peer key.</summary>
    private static HttpRequestMessage Signed(HttpMethod method, Uri endpoint, string service, string header, string peerKey)
    {
        var request = new HttpRequestMessage(method, endpoint);
        if (method == HttpMethod.Post)
        {
            request.Content = new ByteArrayContent([]);
            request.Content.Headers.ContentType = new MediaTypeHeaderValue("application/octet-stream");
        }

        request.Headers.Add("PS-Replication", header);
        request.Headers.Add("PS-Caller", service);
        request.Headers.Add("PS-Callee", service);
        var message = new PeerMessage(method.Method, endpoint.PathAndQuery, service, service, "", "", "replication", header,
            method == HttpMethod.Post ? "application/octet-stream" : "");
        request.Headers.Add("PS-Signature", PeerSignature.Sign(Encoding.UTF8.GetBytes(peerKey), DateTimeOffset.UtcNow.ToUnixTimeMilliseconds(), PeerSignature.V2, message, []));
        return request;
    }

    private static int Print(HttpResponseMessage response, TextWriter output, TextWriter error)
    {
        using (response)
        {
            var body = response.Content.ReadAsStringAsync().GetAwaiter().GetResult();
            if (response.IsSuccessStatusCode)
            {
                output.WriteLine(body);
                return Cli.Clean;
            }

            error.WriteLine($"psctl replication: {(int)response.StatusCode} {body}");
            return (int)response.StatusCode is >= 400 and < 500 ? Cli.Refused : Cli.CannotCheck;
        }
    }
}
