using System.Globalization;
using System.Text;

namespace PersistentServices.CrashHarness;

/// <summary>What the clients do and how the result is checked.</summary>
internal enum Scenario
{
    /// <summary>Per-session counter (session state).</summary>
    Counter,

    /// <summary>Shared inventory (shared state), checked against one serial order.</summary>
    Inventory,
}

/// <summary>The harness's command line, parsed by hand (no System.CommandLine in this repository).</summary>
internal sealed class Options
{
    /// <summary>The usage text printed by <c>--help</c> and after a bad argument.</summary>
    public const string Usage = """
        ps-crash-harness: SIGKILLs a service again and again while client sessions use it, then checks from the
        client side that every acknowledged operation executed exactly once (nothing lost, nothing duplicated).

        The service must speak the PersistentServices protocol (POST /ps/sessions, PS-Session and PS-Seq headers)
        and expose the sample's counter contract:
          POST <add-path>   body {"opId":"...","amount":n}   -> 200 {"total":n,"operations":count}  ([Persistent])
          GET  <state-path> with PS-Session                   -> 200 {"total":n,"operations":["opId",...]}
          GET  <ready-path>                                   -> 200 once the service accepts traffic

        Usage: ps-crash-harness --service <command> [--service-args "<args>"] [options]

          --service <command>          program to start, e.g. dotnet (required)
          --service-args <args>        its arguments, one string split on spaces ("..." quotes a space); {port} and
                                       {log-dir} are replaced by the port and log directory
          --no-append-args             do not append --urls http://127.0.0.1:<port>
                                       --PersistentServices:LogDirectory=<dir> to the service's arguments
          --port <n>                   loopback port of the service (default: a free port)
          --log-dir <dir>              the service's log directory (default: a fresh temporary directory)
          --keep                       keep the temporary log directory at the end
          --sessions <n>               concurrent client sessions (default 8)
          --kills <n>                  SIGKILLs to run (default 100)
          --max-seconds <n>            hard bound on the whole run, verification included (default 600)
          --min-uptime-ms <n>          shortest time the service runs after it is ready, before a kill (default 200)
          --max-uptime-ms <n>          longest such time (default 1500)
          --ready-timeout-seconds <n>  longest wait for the service to become ready after a start (default 60)
          --request-timeout-ms <n>     timeout of one HTTP request; a timed-out request is retried (default 2000)
          --sessions-path <path>       the session resource (default /ps/sessions)
          --scenario <name>            counter (default): per-session counter, each op checked against the client's model;
                                       inventory: shared stock of 4 SKUs adjusted by all sessions; the acknowledged replies
                                       must be explained by one serial order (ticket order), checked at the end
          --add-path <path>            persistent add endpoint (default /counter/add; /inventory/adjust for inventory)
          --state-path <path>          read-only state endpoint (default /counter)
          --ready-path <path>          readiness endpoint (default /health/ready)
          --seed <n>                   seed of the operations and kill times (default: random, printed)
          --fresh-log-each-restart     SELF-TEST ONLY: restart the service on a new, empty log directory, so it
                                       forgets everything; proves the harness detects lost operations
          --verbose                    print kills, restarts, retries and the service's output as they happen
          --help                       print this text

        Exit code: 0 when at least one kill happened, at least one operation was acknowledged and nothing was
        lost, duplicated or otherwise wrong; 1 otherwise; 2 for bad arguments. The last line of the output is
        RESULT kills=<k> acknowledged=<a> lost=<l> duplicated=<d> violations=<v>
        """;

    public string Service { get; private set; } = "";

    public IReadOnlyList<string> ServiceArgs { get; private set; } = [];

    public bool AppendArgs { get; private set; } = true;

    public int Port { get; private set; }

    public string? LogDirectory { get; private set; }

    public bool Keep { get; private set; }

    public int Sessions { get; private set; } = 8;

    public int Kills { get; private set; } = 100;

    public int MaxSeconds { get; private set; } = 600;

    public int MinUptimeMs { get; private set; } = 200;

    public int MaxUptimeMs { get; private set; } = 1500;

    public int ReadyTimeoutSeconds { get; private set; } = 60;

    public int RequestTimeoutMs { get; private set; } = 2000;

    public string SessionsPath { get; private set; } = "/ps/sessions";

    public Scenario Scenario { get; private set; } = Scenario.Counter;

    public string AddPath { get; private set; } = "/counter/add";

    public string StatePath { get; private set; } = "/counter";

    public string ReadyPath { get; private set; } = "/health/ready";

    public int Seed { get; private set; } = Random.Shared.Next();

    public bool FreshLogEachRestart { get; private set; }

    public bool Verbose { get; private set; }

    public bool Help { get; private set; }

    /// <summary>Parses <paramref name="args"/>; null with <paramref name="error"/> set when they are wrong.</summary>
    public static Options? Parse(IReadOnlyList<string> args, out string? error)
    {
        var options = new Options();
        string? problem = null;
        for (var i = 0; i < args.Count && problem is null; i++)
        {
            var name = args[i];
            string Value()
            {
                if (i + 1 >= args.Count)
                {
                    problem = $"{name} needs a value";
                    return "";
                }

                return args[++i];
            }

            int Number(int min, int max)
            {
                var text = Value();
                if (problem is null && (!int.TryParse(text, NumberStyles.AllowLeadingSign, CultureInfo.InvariantCulture, out var n) || n < min || n > max))
                {
                    problem = $"{name} needs a whole number from {min} to {max}, not '{text}'";
                }

                return problem is null ? int.Parse(text, CultureInfo.InvariantCulture) : 0;
            }

            string PathValue()
            {
                var value = Value();
                if (problem is null && !value.StartsWith('/'))
                {
                    problem = $"{name} needs a path that starts with '/', not '{value}'";
                }

                return value;
            }

            switch (name)
            {
                case "--help" or "-h" or "-?": options.Help = true; break;
                case "--service": options.Service = Value(); break;
                case "--service-args": options.ServiceArgs = SplitArguments(Value()); break;
                case "--no-append-args": options.AppendArgs = false; break;
                case "--port": options.Port = Number(1, 65535); break;
                case "--log-dir": options.LogDirectory = Value(); break;
                case "--keep": options.Keep = true; break;
                case "--sessions": options.Sessions = Number(1, 1000); break;
                case "--kills": options.Kills = Number(0, 1_000_000); break;
                case "--max-seconds": options.MaxSeconds = Number(1, 7 * 24 * 3600); break;
                case "--min-uptime-ms": options.MinUptimeMs = Number(0, 3_600_000); break;
                case "--max-uptime-ms": options.MaxUptimeMs = Number(0, 3_600_000); break;
                case "--ready-timeout-seconds": options.ReadyTimeoutSeconds = Number(1, 3600); break;
                case "--request-timeout-ms": options.RequestTimeoutMs = Number(10, 3_600_000); break;
                case "--sessions-path": options.SessionsPath = PathValue(); break;
                case "--scenario":
                    options.Scenario = Value() switch
                    {
                        "counter" => Scenario.Counter,
                        "inventory" => Scenario.Inventory,
                        var other => throw new ArgumentException($"--scenario must be counter or inventory, not '{other}'"),
                    };
                    if (options.Scenario == Scenario.Inventory)
                    {
                        options.AddPath = options.AddPath == "/counter/add" ? "/inventory/adjust" : options.AddPath;
                        options.StatePath = options.StatePath == "/counter" ? "/inventory" : options.StatePath;
                    }

                    break;
                case "--add-path": options.AddPath = PathValue(); break;
                case "--state-path": options.StatePath = PathValue(); break;
                case "--ready-path": options.ReadyPath = PathValue(); break;
                case "--seed": options.Seed = Number(int.MinValue, int.MaxValue); break;
                case "--fresh-log-each-restart": options.FreshLogEachRestart = true; break;
                case "--verbose" or "-v": options.Verbose = true; break;
                default: problem = $"unknown argument '{name}'"; break;
            }
        }

        if (problem is null && !options.Help)
        {
            problem = options.Service.Length == 0 ? "--service is required"
                : options.MinUptimeMs > options.MaxUptimeMs ? "--min-uptime-ms must not exceed --max-uptime-ms"
                : !options.AppendArgs && options.Port == 0 ? "--no-append-args needs --port (the harness must know where the service listens)"
                : null;
        }

        error = problem;
        return problem is null ? options : null;
    }

    /// <summary>Splits one argument string on spaces; double quotes group words, a backslash escapes a quote.</summary>
    public static List<string> SplitArguments(string text)
    {
        var result = new List<string>();
        var current = new StringBuilder();
        var quoted = false;
        var any = false;
        for (var i = 0; i < text.Length; i++)
        {
            var c = text[i];
            if (c == '\\' && i + 1 < text.Length && text[i + 1] == '"')
            {
                current.Append('"');
                any = true;
                i++;
            }
            else if (c == '"')
            {
                quoted = !quoted;
                any = true;
            }
            else if (char.IsWhiteSpace(c) && !quoted)
            {
                if (any)
                {
                    result.Add(current.ToString());
                    current.Clear();
                    any = false;
                }
            }
            else
            {
                current.Append(c);
                any = true;
            }
        }

        if (any)
        {
            result.Add(current.ToString());
        }

        return result;
    }
}
