using System.Diagnostics;
using Bookstore.Buyer;

namespace Bookstore.Launcher;

/// <summary>What the display shows: the last step of each operation, recent events, counters. Thread-safe.</summary>
internal sealed class RunStatus(string title, string runDirectory, int? loopsPlanned)
{
    private const int EventsKept = 8;
    private static readonly string[] Operations = ["search", "add", "show", "empty"];

    private readonly object _gate = new();
    private readonly Dictionary<string, BuyerStep> _steps = new(StringComparer.Ordinal);
    private readonly List<(TimeSpan At, string Text)> _events = [];

    public string Title => title;

    public string RunDirectory => runDirectory;

    public int? LoopsPlanned => loopsPlanned;

    public Stopwatch Clock { get; } = Stopwatch.StartNew();

    public int Loops { get; private set; }

    public int Kills { get; private set; }

    public int Retries { get; set; }

    public string Phase { get; set; } = "starting";

    /// <summary>Each service's log forces and commits since its (last) start, polled once a second.</summary>
    public IReadOnlyDictionary<string, ForceCounts> Forces { get; set; } = new Dictionary<string, ForceCounts>();

    /// <summary>Each new event, as it happens (the plain display prints it).</summary>
    public event Action<TimeSpan, string>? EventAdded;

    public void Step(BuyerStep step)
    {
        lock (_gate)
        {
            _steps[step.Operation] = step;
            if (step.Operation == "empty")
            {
                Loops = step.Loop;
            }
        }
    }

    public void Event(string text)
    {
        var at = Clock.Elapsed;
        lock (_gate)
        {
            _events.Add((at, text));
            if (_events.Count > EventsKept)
            {
                _events.RemoveAt(0);
            }
        }

        EventAdded?.Invoke(at, text);
    }

    public void Killed() => Kills++;

    public (IReadOnlyList<BuyerStep> Steps, IReadOnlyList<(TimeSpan At, string Text)> Events) Snapshot()
    {
        lock (_gate)
        {
            var steps = Operations.Where(_steps.ContainsKey).Select(o => _steps[o]).ToList();
            return (steps, _events.ToList());
        }
    }
}
