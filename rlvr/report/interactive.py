"""Draw a report figure's data as an interactive plotly figure: zoom, pan, hover, legend toggles.

Each figure carries both x axes (iteration and wall-clock seconds) and two buttons that switch
between them; an eval point shows how long the eval took (hover, and a bar back to where the
eval started on the seconds axis). plotly.js itself is written into the page once
(`plotly_js()`, bundled with the plotly package), so the report works offline.
"""

from __future__ import annotations

import importlib.util

from rlvr.report.figures import ITERATION_AXIS, WARNING_COLOR, X_AXES, X_LABELS, FigureData, Series

DASHES = ("solid", "dash", "dot", "dashdot")
PLOT_CONFIG = {"displaylogo": False, "responsive": True}
PANEL_HEIGHT_PX, PANEL_GAP_PX = 260, 80  # a stacked figure: each run's panel, and the gap between two


def plotly_available() -> bool:
    return importlib.util.find_spec("plotly") is not None


def plotly_js() -> str:
    """The plotly.js bundle that ships inside the plotly package (no network)."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def _hover(series: Series, value_format: str = ".4g") -> tuple[list[list], str]:
    customdata = [[it, sec, dur] for it, sec, dur in zip(series.iterations, series.seconds,
                                                         series.durations or [None] * len(series.values))]
    template = (f"<b>{series.label}</b><br>%{{y:{value_format}}}<br>iteration %{{customdata[0]}}"
                "<br>%{customdata[1]:.1f} s into the run")
    if series.durations is not None:
        template += "<br>the eval took %{customdata[2]:.1f} s"
    return customdata, template + "<extra></extra>"


def _line_traces(data: FigureData, x: str) -> list:
    import plotly.graph_objects as go

    traces = []
    for series in data.series:
        customdata, template = _hover(series)
        trace = go.Scatter(
            x=series.xs(x), y=series.values, name=series.label, mode="lines+markers", customdata=customdata,
            hovertemplate=template, line={"color": series.color, "dash": DASHES[series.style_index % len(DASHES)]},
            marker={"size": 5},
        )
        if series.durations is not None:  # the eval ran during the `durations` seconds before its point
            trace.error_x = {"type": "data", "symmetric": False, "array": [0.0] * len(series.durations),
                             "arrayminus": series.durations, "visible": x == "seconds", "thickness": 1}
        traces.append(trace)
    return traces


def _stacked_figure(data: FigureData, x: str):
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    rows = len(data.panels)
    titles = [label for label, _ in data.panels] if rows > 1 else None  # the run of each panel
    height = PANEL_HEIGHT_PX * rows + 140
    # plotly takes the gap between panels as a share of the height (at most 1 / (rows - 1)): a fixed
    # number of pixels keeps a sweep of 15 runs drawable and its panels as tall as two runs' are.
    spacing = min(PANEL_GAP_PX / height, 1 / (rows - 1)) if rows > 1 else 0.05
    figure = make_subplots(rows=rows, cols=1, shared_xaxes=True, subplot_titles=titles, vertical_spacing=spacing)
    shown = set()
    for row, (_, parts) in enumerate(data.panels, start=1):
        for series in parts:
            customdata, template = _hover(series, ".2f")
            figure.add_trace(go.Bar(x=series.xs(x), y=series.values, name=series.label, legendgroup=series.label,
                                    showlegend=series.label not in shown, marker_color=series.color,
                                    customdata=customdata, hovertemplate=template), row=row, col=1)
            shown.add(series.label)
        figure.update_yaxes(title_text=data.ylabel, row=row, col=1)
    figure.update_layout(barmode="stack", height=height)
    return figure


def _marker_layout(data: FigureData, x: str) -> tuple[list[dict], list[dict]]:
    """Health warning markers on the `x` axis: a dashed vertical line and its label each."""
    placed = [(marker.x(x), marker.label) for marker in data.markers if marker.x(x) is not None]
    shapes = [{"type": "line", "xref": "x", "yref": "paper", "x0": at, "x1": at, "y0": 0, "y1": 1,
               "line": {"color": WARNING_COLOR, "dash": "dash", "width": 1}} for at, _ in placed]
    notes = [{"x": at, "xref": "x", "y": 1, "yref": "paper", "text": label, "showarrow": False, "textangle": -90,
              "xanchor": "right", "yanchor": "top", "font": {"size": 9, "color": WARNING_COLOR}}
             for at, label in placed]
    return shapes, notes


def _axis_names(figure) -> list[str]:
    return [name for name in figure.layout.to_plotly_json() if name.startswith("xaxis")] or ["xaxis"]


def _x_buttons(figure, data: FigureData, x: str) -> None:
    """Two buttons that move every trace to the other x axis (with the eval spans shown only in seconds)."""
    series = data.series if data.kind == "lines" else [s for _, parts in data.panels for s in parts]
    axes = _axis_names(figure)
    buttons = []
    for axis in X_AXES:
        restyle = {"x": [s.xs(axis) for s in series]}
        if data.kind == "lines":
            restyle["error_x.visible"] = [axis == "seconds" and s.durations is not None for s in series]
        relayout = {f"{name}.autorange": True for name in axes}
        relayout[f"{axes[-1]}.title.text"] = X_LABELS[axis]
        if data.markers:
            relayout["shapes"], relayout["annotations"] = _marker_layout(data, axis)
        buttons.append({"label": f"x: {axis}", "method": "update", "args": [restyle, relayout]})
    figure.update_layout(updatemenus=[{
        "type": "buttons", "direction": "right", "x": 1.0, "xanchor": "right", "y": 1.02, "yanchor": "bottom",
        "buttons": buttons, "active": X_AXES.index(x), "showactive": True, "pad": {"r": 0, "t": 0},
    }])


def plotly_figure(data: FigureData, x: str = ITERATION_AXIS):
    """A plotly Figure for `data`, showing the `x` axis first."""
    import plotly.graph_objects as go

    if data.kind == "stacked":
        figure = _stacked_figure(data, x)
    else:
        figure = go.Figure(_line_traces(data, x))
        figure.update_layout(yaxis_title=data.ylabel, height=400)
        if data.markers:
            shapes, notes = _marker_layout(data, x)
            figure.update_layout(shapes=shapes, annotations=notes)
    # The title at the top of the figure, the x-axis buttons below it at the plot's top right.
    figure.update_layout(title={"text": data.title, "x": 0.02, "y": 0.985, "yanchor": "top", "font": {"size": 15}},
                         template="plotly_white", margin={"l": 60, "r": 20, "t": 95, "b": 50}, hovermode="closest",
                         legend={"font": {"size": 10}}, width=640)
    figure.layout[_axis_names(figure)[-1]].title = X_LABELS[x]
    _x_buttons(figure, data, x)
    return figure


def figure_html(data: FigureData, x: str = ITERATION_AXIS) -> str:
    """A <div> and the script that draws the figure into it (plotly.js must already be on the page)."""
    import plotly.io

    return plotly.io.to_html(plotly_figure(data, x), include_plotlyjs=False, full_html=False,
                             div_id=f"plot-{data.name}", config=PLOT_CONFIG)
